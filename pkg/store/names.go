package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// maxEscapedName bounds an escaped name so it fits a file name.
const maxEscapedName = 200

// hashedPrefix is how much of a long name's escaped form its directory
// name keeps before the hash: with "~" and 32 hex digits it stays within
// maxEscapedName.
const hashedPrefix = maxEscapedName - 1 - 32

// errHashedName is returned by unescapeName for the directory name of a
// long name: the name itself is in the shard's manifest.
var errHashedName = errors.New("hashed name")

// escapeName turns a collection or source name into a directory name:
// bytes in [A-Za-z0-9._-] stay, everything else (and a leading '.') becomes
// %XX (uppercase hex). The mapping is injective and its output never
// contains a path separator, so "../x" cannot escape the store.
//
// A name whose escaped form is longer than maxEscapedName bytes (a
// 63-byte PostgreSQL table name in Cyrillic, quoted, in a long schema is)
// becomes a prefix of it, "~" and 32 hex digits of the name's SHA-256:
// "~" is always escaped otherwise, so such names never meet escaped ones,
// and the manifest, which holds the name, tells a hash collision from a
// match.
func escapeName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("name is empty: %w", ErrInvalid)
	}
	var b strings.Builder
	keep := 0 // length of b at the last byte boundary within hashedPrefix
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
		if b.Len() <= hashedPrefix {
			keep = b.Len()
		}
	}
	if b.Len() <= maxEscapedName {
		return b.String(), nil
	}
	sum := sha256.Sum256([]byte(name))
	return b.String()[:keep] + "~" + hex.EncodeToString(sum[:16]), nil
}

// unescapeName reverses escapeName; for the name of a long name it
// returns errHashedName.
func unescapeName(s string) (string, error) {
	if strings.IndexByte(s, '~') >= 0 {
		return "", fmt.Errorf("unescape %q: %w", s, errHashedName)
	}
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

// randomHex returns n random bytes in hex: unique names and identities.
func randomHex(n int) string {
	r := make([]byte, n)
	rand.Read(r)
	return hex.EncodeToString(r)
}
