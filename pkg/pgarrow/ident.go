package pgarrow

import (
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
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
