package store

import (
	"fmt"
	"strings"
)

// maxEscapedName bounds an escaped name so it fits a file name.
const maxEscapedName = 200

// escapeName turns a collection or source name into a directory name:
// bytes in [A-Za-z0-9._-] stay, everything else (and a leading '.') becomes
// %XX (uppercase hex). The mapping is injective and its output never
// contains a path separator, so "../x" cannot escape the store.
func escapeName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("name is empty: %w", ErrInvalid)
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		case c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() > maxEscapedName {
		return "", fmt.Errorf("name %q is too long (%d bytes escaped, at most %d): %w", name, b.Len(), maxEscapedName, ErrInvalid)
	}
	return b.String(), nil
}

// unescapeName reverses escapeName.
func unescapeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+3 > len(s) {
			return "", fmt.Errorf("unescape %q: truncated escape", s)
		}
		var v byte
		for _, h := range []byte(s[i+1 : i+3]) {
			v <<= 4
			switch {
			case h >= '0' && h <= '9':
				v |= h - '0'
			case h >= 'A' && h <= 'F':
				v |= h - 'A' + 10
			default:
				return "", fmt.Errorf("unescape %q: bad escape", s)
			}
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}
