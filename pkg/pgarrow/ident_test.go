package pgarrow

import (
	"errors"
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/internal/hint"
)

func TestQuoteIdent(t *testing.T) {
	for in, want := range map[string]string{
		"orders": "orders", "order_lines2": "order_lines2", "Orders": `"Orders"`, "odd name": `"odd name"`,
		"2x": `"2x"`, `a"b`: `"a""b"`, "select": `"select"`, "window": `"window"`, "": `""`, "таблица": `"таблица"`,
	} {
		if got := QuoteIdent(in); got != want {
			t.Errorf("QuoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestCollectionName is the documented naming scheme (docs/naming.md).
func TestCollectionName(t *testing.T) {
	long := strings.Repeat("x", MaxIdentLen)
	for _, tc := range []struct{ schema, name, want string }{
		{"public", "orders", "public.orders"},
		{"public", "order_lines2", "public.order_lines2"},
		{"public", "a$b", "public.a$b"},
		{"public", "user", "public.user"}, // key words stay bare
		{"public", "RelMix", `public."RelMix"`},
		{"public", "relmix", "public.relmix"},
		{"a.b", "c", `"a.b".c`},
		{"a", "b.c", `a."b.c"`},
		{"public", "space table", `public."space table"`},
		{"MixedCase", "MixedTable", `"MixedCase"."MixedTable"`},
		{"public", `q"uote`, `public."q""uote"`},
		{"public", "1st", `public."1st"`},
		{"public", "$x", `public."$x"`},
		{"public", "таблица", "public.таблица"},
		{"public", "Таблица", `public."Таблица"`},
		{"public", "数据", "public.数据"},
		{"public", "🙂", `public."🙂"`},
		{"public", "a\u00a0b", `public."a` + "\u00a0" + `b"`}, // no-break space
		{"public", "", `public.""`},
		{"public", long, "public." + long},
	} {
		if got := CollectionName(tc.schema, tc.name); got != tc.want {
			t.Errorf("CollectionName(%q, %q) = %s, want %s", tc.schema, tc.name, got, tc.want)
		}
		if tc.name == "" {
			continue
		}
		n, err := ParseTableName(tc.want)
		if err != nil || n != (TableName{tc.schema, tc.name}) {
			t.Errorf("ParseTableName(%s) = %+v, %v; want %q.%q", tc.want, n, err, tc.schema, tc.name)
		}
	}
}

func TestParseTableName(t *testing.T) {
	for in, want := range map[string]TableName{
		"orders":                   {"", "orders"},
		"Orders":                   {"", "orders"},
		"public.orders":            {"public", "orders"},
		"PUBLIC.RelMix":            {"public", "relmix"},
		`public."RelMix"`:          {"public", "RelMix"},
		` "a.b" . c `:              {"a.b", "c"},
		`a."b.c"`:                  {"a", "b.c"},
		`"a"."b.c"`:                {"a", "b.c"},
		`public."q""uote"`:         {"public", `q"uote`},
		`public.""""`:              {"public", `"`},
		`public."a,b"`:             {"public", "a,b"},
		`"MixedCase"."MixedTable"`: {"MixedCase", "MixedTable"},
		`public."space table"`:     {"public", "space table"},
		"public.Таблица":           {"public", "Таблица"}, // only ASCII folds
		"public.ТаБлИцА_X":         {"public", "ТаБлИцА_x"},
		"s.t$1":                    {"s", "t$1"},
		"_x._y":                    {"_x", "_y"},
		"\tpublic.orders\n":        {"public", "orders"},
		`"` + strings.Repeat(`""`, MaxIdentLen) + `"`: {"", strings.Repeat(`"`, MaxIdentLen)},
		strings.Repeat("ж", 31) + "x":                 {"", strings.Repeat("ж", 31) + "x"},
	} {
		got, err := ParseTableName(in)
		if err != nil || got != want {
			t.Errorf("ParseTableName(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"":                                 "empty name",
		"   ":                              "empty name",
		"public.":                          "no name after the last dot",
		".orders":                          `unexpected '.'`,
		"a.b.c":                            "3 dot-separated parts",
		`public."RelMix`:                   "unterminated quoted name",
		`public.""`:                        "empty quoted name",
		"public.space table":               `unexpected 't'`,
		"public.1st":                       `unexpected '1'`,
		"public.a-b":                       `unexpected '-'`,
		"public.a,b":                       `unexpected ','`,
		`public."a"b`:                      `unexpected 'b'`,
		"public.`x`":                       "unexpected '`'",
		strings.Repeat("x", MaxIdentLen+1): "64 bytes long",
		strings.Repeat("ж", 32):            "64 bytes long",
	} {
		_, err := ParseTableName(in)
		if err == nil {
			t.Errorf("ParseTableName(%q) accepted", in)
			continue
		}
		if !errors.Is(err, ErrBadTableName) || !strings.Contains(err.Error(), why) || hint.Of(err) == "" {
			t.Errorf("ParseTableName(%q) = %v (hint %q); want ErrBadTableName saying %q, with a hint", in, err, hint.Of(err), why)
		}
	}
}

// FuzzCollectionName: every collection name reads back as exactly its
// schema and name, so two tables never share one.
func FuzzCollectionName(f *testing.F) {
	for _, s := range [][2]string{{"public", "orders"}, {"a.b", "c"}, {"a", "b.c"}, {"", ""}, {`"`, `""`}, {"Ж", "ж"}, {"a b", "\x00"}, {"\xff", "é"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, schema, name string) {
		if schema == "" || name == "" || len(schema) > MaxIdentLen || len(name) > MaxIdentLen {
			return
		}
		c := CollectionName(schema, name)
		got, err := ParseTableName(c)
		if err != nil || got != (TableName{schema, name}) {
			t.Fatalf("CollectionName(%q, %q) = %s reads back as %+v, %v", schema, name, c, got, err)
		}
	})
}
