package main

import (
	"strings"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// pgTables reads --tables of a PostgreSQL source: names as
// pgarrow.ParseTableName reads them (public.orders, public."RelMix",
// "a.b".c), collection names included.
func pgTables(vals ...string) ([]string, error) { return pgNames("--tables", vals...) }

// pgNames reads flag's PostgreSQL table names, as pgTables does.
func pgNames(flag string, vals ...string) ([]string, error) {
	return tableList(flag, func(s string) error { _, err := pgarrow.ParseTableName(s); return err }, vals...)
}

// myTables reads --tables of a MySQL/MariaDB source: db.table as
// myarrow.ParseName reads it (shop.orders, shop.`a.b`).
func myTables(vals ...string) ([]string, error) {
	return tableList("--tables", func(s string) error { _, _, err := myarrow.ParseName(s); return err }, vals...)
}

// tableList splits comma-separated values of flag (--tables; it may be
// given several times) into names, a comma inside double quotes or backticks
// being part of a name, and checks each with parse: a bad name is a usage
// error with the parser's hint.
func tableList(flag string, parse func(string) error, vals ...string) ([]string, error) {
	var out []string
	for _, s := range splitQuoted(strings.Join(vals, ",")) {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if err := parse(s); err != nil {
			return nil, usagef(hint.Of(err), "bad %s: %v", flag, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// splitQuoted splits s at the commas outside "..." and `...` (a doubled
// quote inside is a closing and an opening one, so it needs no care).
func splitQuoted(s string) []string {
	var out []string
	var q byte
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '"' || c == '`':
			q = c
		case c == ',':
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
