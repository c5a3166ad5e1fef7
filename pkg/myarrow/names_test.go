package myarrow

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/internal/hint"
)

// TestCollectionName is the documented naming scheme (docs/naming.md).
func TestCollectionName(t *testing.T) {
	long := strings.Repeat("ж", MaxIdentLen)
	for _, tc := range []struct{ db, name, want string }{
		{"shop", "orders", "shop.orders"},
		{"shop", "Orders", "shop.Orders"}, // MySQL does not fold case
		{"shop", "order", "shop.order"},   // key words stay bare
		{"shop", "123", "shop.123"},
		{"shop", "a$b", "shop.a$b"},
		{"shop", "a.b", "shop.`a.b`"},
		{"a.b", "c", "`a.b`.c"},
		{"a", "b.c", "a.`b.c`"},
		{"shop", "order lines", "shop.`order lines`"},
		{"shop", "a`b", "shop.`a``b`"},
		{"shop", `q"uote`, "shop.`q\"uote`"},
		{"shop", "таблица", "shop.таблица"},
		{"shop", "Таблица", "shop.Таблица"},
		{"shop", "a-b", "shop.`a-b`"},
		{"shop", "🙂", "shop.`🙂`"},
		{"shop", long, "shop." + long},
	} {
		if got := CollectionName(tc.db, tc.name); got != tc.want {
			t.Errorf("CollectionName(%q, %q) = %s, want %s", tc.db, tc.name, got, tc.want)
		}
		db, tb, err := ParseName(tc.want)
		if err != nil || db != tc.db || tb != tc.name {
			t.Errorf("ParseName(%s) = %q, %q, %v; want %q, %q", tc.want, db, tb, err, tc.db, tc.name)
		}
	}
}

func TestParseName(t *testing.T) {
	for in, want := range map[string][2]string{
		"shop.orders":        {"shop", "orders"},
		"Shop.Orders":        {"Shop", "Orders"},
		"`sh.op`.`or``ders`": {"sh.op", "or`ders"},
		" a.b ":              {"a", "b"},
		"a . `b c`":          {"a", "b c"},
		"`a,b`.c":            {"a,b", "c"},
		"s.таблица":          {"s", "таблица"},
		"s.`" + strings.Repeat("ж", MaxIdentLen) + "`": {"s", strings.Repeat("ж", MaxIdentLen)},
	} {
		db, tb, err := ParseName(in)
		if err != nil || db != want[0] || tb != want[1] {
			t.Errorf("%q: %q %q %v", in, db, tb, err)
		}
	}
	for in, why := range map[string]string{
		"orders":           "1 dot-separated part(s)",
		"a.b.c":            "3 dot-separated part(s)",
		".b":               "unexpected '.'",
		"a.":               "no name after the last dot",
		"`a.b":             "unterminated backtick",
		"":                 "empty name",
		"a.``":             "empty quoted name",
		"shop.order lines": "unexpected 'l'",
		"shop.a-b":         "unexpected '-'",
		"shop.a,b":         "unexpected ','",
		"s." + strings.Repeat("ж", MaxIdentLen+1): "65 characters long",
	} {
		_, _, err := ParseName(in)
		if err == nil {
			t.Errorf("%q accepted", in)
			continue
		}
		if !errors.Is(err, ErrBadName) || !strings.Contains(err.Error(), why) || hint.Of(err) == "" {
			t.Errorf("ParseName(%q) = %v (hint %q); want ErrBadName saying %q, with a hint", in, err, hint.Of(err), why)
		}
	}
}

func TestLeadingNames(t *testing.T) {
	for in, want := range map[string][][2]string{
		"t":                       {{"", "t"}},
		"t;":                      {{"", "t"}},
		"db.t1, `d b`.`t,2` , t3": {{"db", "t1"}, {"d b", "t,2"}, {"", "t3"}},
		"a TO b, `c.d` TO e":      {{"", "a"}, {"", "c.d"}},
		"`a`.`b` /* x, y */":      {{"a", "b"}, {"", "y"}},
		"x.`a``b` WAIT 5":         {{"x", "a`b"}},
		"":                        nil,
		"a.b.c, d":                {{"", "d"}},
	} {
		if got := LeadingNames(in); !slices.Equal(got, want) {
			t.Errorf("LeadingNames(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzCollectionName(f *testing.F) {
	for _, s := range [][2]string{{"shop", "orders"}, {"a.b", "c"}, {"a", "b.c"}, {"`", "``"}, {"Ж", "ж"}, {"a b", "\x00"}, {"\xff", "é"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, db, name string) {
		if db == "" || name == "" || len([]rune(db)) > MaxIdentLen || len([]rune(name)) > MaxIdentLen {
			return
		}
		c := CollectionName(db, name)
		gd, gn, err := ParseName(c)
		if err != nil || gd != db || gn != name {
			t.Fatalf("CollectionName(%q, %q) = %s reads back as %q, %q, %v", db, name, c, gd, gn, err)
		}
	})
}
