package myarrow

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rtrctl/rtrctl/internal/hint"
)

// MaxIdentLen is the longest MySQL/MariaDB database or table name, in
// characters.
const MaxIdentLen = 64

// CollectionName is the collection name of table name in database db
// (docs/naming.md): db.name with each part in backticks unless it is
// plain, a ` inside backticks doubled. A plain part is made of ASCII
// letters, digits, $ and _ and of non-ASCII letters, digits and marks of
// the Basic Multilingual Plane, the characters MySQL allows in unquoted
// names (no case folding: MySQL compares names as the server's
// lower_case_table_names says). So shop.orders, shop.Orders,
// shop.`a.b`, `my db`.`order lines`.
//
// The mapping is injective, and ParseName reads a collection name back
// into exactly its database and table: every collection name formed
// from MySQL tables, by snapshot, replicate and ingest alike, comes from
// here.
func CollectionName(db, name string) string {
	return collectionPart(db) + "." + collectionPart(name)
}

func collectionPart(s string) string {
	if plainPart(s) {
		return s
	}
	return QuoteIdent(s)
}

func plainPart(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '$':
		case r >= utf8.RuneSelf && r <= 0xFFFF && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)):
		default:
			return false
		}
	}
	return true
}

// ErrBadName is wrapped by ParseName's errors.
var ErrBadName = errors.New("bad table name")

const nameHint = "name a table as db.table, with backticks around a part that has dots, spaces or other characters " +
	"and a doubled ` inside: --tables 'shop.orders,shop.`order lines`,`my.db`.t'"

// ParseName reads db.table the way MySQL reads a qualified name: each
// part unquoted (ASCII letters, digits, $, _ and any non-ASCII character)
// or in backticks (kept exactly, two backticks standing for one), spaces
// allowed around the dot. Case is kept. It reads every CollectionName
// back exactly. Parts longer than MaxIdentLen characters are an error.
func ParseName(s string) (db, table string, err error) {
	parts, rest, err := scanName(s)
	if err == nil && strings.TrimSpace(rest) != "" {
		r, _ := utf8.DecodeRuneInString(strings.TrimSpace(rest))
		err = fmt.Errorf("unexpected %q at offset %d", r, len(s)-len(strings.TrimLeft(rest, " \t\r\n")))
	}
	if err == nil && len(parts) != 2 {
		err = fmt.Errorf("%d dot-separated part(s), want db.table (e.g. shop.orders)", len(parts))
	}
	if err != nil {
		return "", "", hint.Wrap(fmt.Errorf("parse table name %q: %w: %w", s, ErrBadName, err), nameHint)
	}
	return parts[0], parts[1], nil
}

// identByte is a byte of an unquoted name.
func identByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// scanName reads a dotted name at the start of s (after spaces) and
// returns its parts and what follows.
func scanName(s string) (parts []string, rest string, err error) {
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			if len(parts) == 0 {
				return nil, "", errors.New("empty name")
			}
			return nil, "", errors.New("no name after the last dot")
		}
		var part string
		switch start := i; {
		case s[i] == '`':
			var b strings.Builder
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == '`' {
					if i+1 < len(s) && s[i+1] == '`' {
						b.WriteByte('`')
						i++
						continue
					}
					i++
					closed = true
					break
				}
				b.WriteByte(s[i])
			}
			if !closed {
				return nil, "", fmt.Errorf("unterminated backtick at offset %d", start)
			}
			if part = b.String(); part == "" {
				return nil, "", fmt.Errorf("empty quoted name at offset %d", start)
			}
		case identByte(s[i]):
			for i < len(s) && identByte(s[i]) {
				i++
			}
			part = s[start:i]
		default:
			r, _ := utf8.DecodeRuneInString(s[i:])
			return nil, "", fmt.Errorf("unexpected %q at offset %d", r, i)
		}
		if n := utf8.RuneCountInString(part); n > MaxIdentLen {
			return nil, "", fmt.Errorf("name %q is %d characters long, MySQL names at most %d", part, n, MaxIdentLen)
		}
		parts = append(parts, part)
		j := i
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		if j == len(s) || s[j] != '.' {
			return parts, s[i:], nil
		}
		i = j + 1
	}
}

// LeadingNames reads the table list of a TRUNCATE, DROP TABLE or RENAME
// TABLE statement (what follows the key words): the name that begins
// each comma-separated item, as [db, table] with db "" for an
// unqualified name. Commas inside backticks do not separate items; an
// item that does not begin with a name is skipped.
func LeadingNames(list string) [][2]string {
	var out [][2]string
	for s := list; ; {
		parts, rest, err := scanName(s)
		if err == nil && len(parts) <= 2 {
			n := [2]string{"", parts[len(parts)-1]}
			if len(parts) == 2 {
				n[0] = parts[0]
			}
			out = append(out, n)
		} else {
			rest = s
		}
		k := nextComma(rest)
		if k < 0 {
			return out
		}
		s = rest[k+1:]
	}
}

// nextComma is the offset of the first comma of s outside backticks and
// quotes, or -1.
func nextComma(s string) int {
	var q byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '`' || c == '\'' || c == '"':
			q = c
		case c == ',':
			return i
		}
	}
	return -1
}
