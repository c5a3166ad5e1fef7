package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestLongNames: collection names whose escaped form does not fit a file
// name (the longest PostgreSQL collection names do not) get hashed
// directory names, and are listed and opened by their names.
func TestLongNames(t *testing.T) {
	ctx := context.Background()
	cyr := strings.Repeat("ж", 31) + "x"                         // 63 bytes
	a := `"` + cyr + `".` + `"` + strings.Repeat(`""`, 63) + `"` // the longest: 2 * 63 quotes
	b := `"` + cyr + `"."` + strings.Repeat("Ж", 31) + "y" + `"` // shares a's escaped prefix
	c := "public." + strings.Repeat("x", 63)                     // short enough: escaped as before
	for _, n := range []string{a, b} {
		esc, err := escapeName(n)
		if err != nil || len(esc) > maxEscapedName || !strings.Contains(esc, "~") {
			t.Fatalf("escapeName(%q) = %q (%d bytes), %v; want a hashed name within %d bytes", n, esc, len(esc), err, maxEscapedName)
		}
		if _, err := unescapeName(esc); !errors.Is(err, errHashedName) {
			t.Fatalf("unescapeName(%q) = %v, want errHashedName", esc, err)
		}
	}
	if ea, _ := escapeName(a); ea == func() string { e, _ := escapeName(b); return e }() {
		t.Fatal("two long names share a directory")
	}
	if esc, _ := escapeName(c); esc != c {
		t.Fatalf("escapeName(%q) = %q, want it unchanged", c, esc)
	}
	s := openTest(t, t.TempDir(), Options{})
	for _, n := range []string{a, b, c} {
		createTest(t, s, n, testFields)
	}
	got, err := s.Collections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a, b, c}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Collections = %q, want %q", got, want)
	}
	s2 := openTest(t, s.Dir(), Options{MustExist: true})
	for _, n := range want {
		sh, err := s2.Shard(ctx, n)
		if err != nil {
			t.Fatalf("open %q: %v", n, err)
		}
		if info, err := sh.Info(ctx); err != nil || info.Name != n {
			t.Fatalf("shard %q says it is %q (%v)", n, info.Name, err)
		}
	}
}
