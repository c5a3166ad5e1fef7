package pgarrow

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
)

var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// reserved are PostgreSQL's reserved key words: as identifiers they need
// quotes.
var reserved = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`all analyse analyze and any array as asc asymmetric both case cast check collate column
		constraint create current_catalog current_date current_role current_time current_timestamp current_user default
		deferrable desc distinct do else end except false fetch for foreign from grant group having in initially intersect
		into lateral leading limit localtime localtimestamp not null offset on only or order placing primary references
		returning select session_user some symmetric table then to trailing true union unique user using variadic when
		where window with authorization binary collation concurrently cross current_schema freeze full ilike inner is
		isnull join left like natural notnull outer overlaps right similar tablesample verbose`) {
		reserved[w] = true
	}
}

// QuoteIdent quotes a name for SQL only when it needs quotes: orders
// stays orders, "Odd Name" and "user" are quoted.
func QuoteIdent(s string) string {
	if plainIdent.MatchString(s) && !reserved[s] {
		return s
	}
	return pgx.Identifier{s}.Sanitize()
}

// MaxIdentLen is the longest PostgreSQL identifier in bytes (NAMEDATALEN
// - 1); the server truncates longer names.
const MaxIdentLen = 63

// CollectionName is the collection name of the table name in schema
// (docs/naming.md): schema.name with each part written as PostgreSQL
// would read it back, in double quotes unless it is plain. A plain part
// starts with a lower-case letter or _ and goes on with lower-case
// letters, digits, _ and $ (letters: ASCII a-z, and non-ASCII letters that
// are not upper or title case); inside quotes a " is doubled. So
// public.orders, public."RelMix", "a.b".c, a."b.c", public."q""uote",
// public.таблица. Key words stay bare (public.user): a collection name
// is not SQL (Table.QuotedName is).
//
// The mapping is injective, and ParseTableName reads a collection name
// back into exactly its schema and name: every collection name formed
// from PostgreSQL tables, by snapshot, replicate and ingest alike, comes
// from here.
func CollectionName(schema, name string) string {
	return collectionPart(schema) + "." + collectionPart(name)
}

func collectionPart(s string) string {
	if plainPart(s) {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// plainPart reports whether s reads back unquoted as itself: nothing
// that folds to lower case, nothing that ends an unquoted identifier.
func plainPart(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r == '_':
		case r >= '0' && r <= '9', r == '$':
			if i == 0 {
				return false
			}
		case r >= utf8.RuneSelf:
			if unicode.IsUpper(r) || unicode.IsTitle(r) {
				return false
			}
			if !unicode.IsLetter(r) && (i == 0 || !unicode.IsDigit(r) && !unicode.IsMark(r)) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// TableName is a table named by schema and name, exactly as pg_namespace
// and pg_class spell them. Schema "" means the table is looked up on the
// search_path.
type TableName struct{ Schema, Name string }

// String is the collection name (just the name, formed the same way,
// when there is no schema).
func (n TableName) String() string {
	if n.Schema == "" {
		return collectionPart(n.Name)
	}
	return CollectionName(n.Schema, n.Name)
}

// SQL is the name for SQL, each part quoted where SQL needs it.
func (n TableName) SQL() string {
	if n.Schema == "" {
		return QuoteIdent(n.Name)
	}
	return QuoteIdent(n.Schema) + "." + QuoteIdent(n.Name)
}

// ErrBadTableName is wrapped by ParseTableName's errors.
var ErrBadTableName = errors.New("bad table name")

// tableNameHint is the hint of every ParseTableName error.
const tableNameHint = `name a table as table or schema.table, as SQL does: unquoted names fold to lower case; ` +
	`put a name with capitals, spaces, dots or other characters in double quotes and double a " inside, ` +
	`e.g. --tables 'public."Order Lines",sales."a.b"'`

// ParseTableName reads a table name the way PostgreSQL reads one in SQL:
// table or schema.table (spaces around the dot allowed), each part either
// unquoted, folded to lower case (ASCII letters only, as PostgreSQL folds
// in a UTF-8 database), or in double quotes, kept exactly, a doubled ""
// standing for one ". Dots and commas inside quotes are part of the
// name. It reads every CollectionName back exactly. Parts longer than
// MaxIdentLen bytes are an error (the server would truncate them).
func ParseTableName(s string) (TableName, error) {
	parts, err := parseIdentPath(s)
	if err != nil {
		return TableName{}, hint.Wrap(fmt.Errorf("parse table name %q: %w: %w", s, ErrBadTableName, err), tableNameHint)
	}
	switch len(parts) {
	case 1:
		return TableName{Name: parts[0]}, nil
	case 2:
		return TableName{Schema: parts[0], Name: parts[1]}, nil
	}
	return TableName{}, hint.Wrap(fmt.Errorf("parse table name %q: %w: %d dot-separated parts, want table or schema.table", s, ErrBadTableName, len(parts)),
		tableNameHint)
}

// identStart and identCont are the bytes of PostgreSQL's unquoted
// identifiers (scan.l: ident_start, ident_cont): every non-ASCII byte
// belongs.
func identStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func identCont(c byte) bool { return identStart(c) || c >= '0' && c <= '9' || c == '$' }

// parseIdentPath splits a dotted path of identifiers.
func parseIdentPath(s string) ([]string, error) {
	var parts []string
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			if len(parts) == 0 {
				return nil, errors.New("empty name")
			}
			return nil, errors.New("no name after the last dot")
		}
		var part string
		switch start := i; {
		case s[i] == '"':
			var b strings.Builder
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
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
				return nil, fmt.Errorf("unterminated quoted name at offset %d", start)
			}
			if part = b.String(); part == "" {
				return nil, fmt.Errorf("empty quoted name at offset %d", start)
			}
		case identStart(s[i]):
			for i < len(s) && identCont(s[i]) {
				i++
			}
			part = foldASCII(s[start:i])
		default:
			r, _ := utf8.DecodeRuneInString(s[i:])
			return nil, fmt.Errorf("unexpected %q at offset %d", r, i)
		}
		if len(part) > MaxIdentLen {
			return nil, fmt.Errorf("name %q is %d bytes long, PostgreSQL names at most %d", part, len(part), MaxIdentLen)
		}
		parts = append(parts, part)
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			return parts, nil
		}
		if s[i] != '.' {
			r, _ := utf8.DecodeRuneInString(s[i:])
			return nil, fmt.Errorf("unexpected %q at offset %d (after %q)", r, i, part)
		}
		i++
	}
}

// foldASCII lower-cases ASCII letters only, as PostgreSQL's
// downcase_identifier does in a multi-byte encoding.
func foldASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
