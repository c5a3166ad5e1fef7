package frontier

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func mustNew(t testing.TB, d Domain, parts map[string]uint64) Frontier {
	t.Helper()
	f, err := New(d, parts)
	if err != nil {
		t.Fatalf("New(%s, %v): %v", d, parts, err)
	}
	return f
}

// kf builds a kafka frontier from alternating partition, upper pairs.
func kf(t testing.TB, kv ...any) Frontier {
	t.Helper()
	m := map[string]uint64{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = uint64(kv[i+1].(int))
	}
	return mustNew(t, DomainKafka, m)
}

// checkInvariant checks the representation invariant: a known domain,
// valid partitions, no zero uppers, nil map when empty.
func checkInvariant(t testing.TB, f Frontier) {
	t.Helper()
	if _, err := ParseDomain(string(f.domain)); err != nil {
		t.Errorf("frontier has unknown domain %q", f.domain)
	}
	if f.parts != nil && len(f.parts) == 0 {
		t.Errorf("empty frontier of %s has a non-nil empty map", f.domain)
	}
	for p, v := range f.parts {
		if v == 0 {
			t.Errorf("frontier of %s holds partition %q at 0", f.domain, p)
		}
		if err := checkPartition(f.domain, p); err != nil {
			t.Errorf("frontier holds bad partition: %v", err)
		}
	}
}

func TestParseDomain(t *testing.T) {
	for _, d := range Domains {
		t.Run(string(d), func(t *testing.T) {
			got, err := ParseDomain(string(d))
			if err != nil || got != d {
				t.Fatalf("ParseDomain(%q) = %q, %v", d, got, err)
			}
		})
	}
	for _, s := range []string{"", "LSN", "Kafka", "system", "gtid", " lsn", "lsn "} {
		t.Run("bad/"+s, func(t *testing.T) {
			if _, err := ParseDomain(s); err == nil {
				t.Fatalf("ParseDomain(%q) succeeded", s)
			}
		})
	}
	want := map[Domain]bool{DomainLSN: false, DomainSystem: false, DomainMySQL: true, DomainMariaDB: true, DomainKafka: true}
	for d, p := range want {
		if d.Partitioned() != p {
			t.Errorf("%s.Partitioned() = %v, want %v", d, d.Partitioned(), p)
		}
	}
	if len(Domains) != len(want) {
		t.Errorf("Domains has %d entries, want %d", len(Domains), len(want))
	}
}

func TestNew(t *testing.T) {
	good := []struct {
		name    string
		d       Domain
		parts   map[string]uint64
		wantLen int
	}{
		{"lsn", DomainLSN, map[string]uint64{"": 5}, 1},
		{"lsn nil", DomainLSN, nil, 0},
		{"system", DomainSystem, map[string]uint64{"": 1732900000000}, 1},
		{"kafka", DomainKafka, map[string]uint64{"0": 1, "10": 2}, 2},
		{"kafka non-numeric partition", DomainKafka, map[string]uint64{"orders-0": 1}, 1},
		{"kafka negative partition", DomainKafka, map[string]uint64{"-1": 1}, 1},
		{"kafka unicode partition", DomainKafka, map[string]uint64{"zähler": 1}, 1},
		{"kafka zero dropped", DomainKafka, map[string]uint64{"0": 0, "1": 3}, 1},
		{"lsn zero dropped", DomainLSN, map[string]uint64{"": 0}, 0},
		{"mariadb", DomainMariaDB, map[string]uint64{"0": 1, "4294967295": 7}, 2},
		{"mysql", DomainMySQL, map[string]uint64{u1: 3, u2: 1}, 2},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			f, err := New(c.d, c.parts)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if f.Domain() != c.d || f.Len() != c.wantLen || f.IsEmpty() != (c.wantLen == 0) {
				t.Fatalf("New = %s %v (len %d)", f.Domain(), f.Map(), f.Len())
			}
			for p, v := range c.parts {
				if f.Get(p) != v {
					t.Errorf("Get(%q) = %d, want %d", p, f.Get(p), v)
				}
			}
			checkInvariant(t, f)
		})
	}

	t.Run("copies its map", func(t *testing.T) {
		m := map[string]uint64{"0": 5}
		f := mustNew(t, DomainKafka, m)
		m["0"] = 9
		m["1"] = 1
		if f.Get("0") != 5 || f.Len() != 1 {
			t.Fatalf("New kept a reference to its argument: %v", f.Map())
		}
		g := f.Map()
		g["0"] = 1
		if f.Get("0") != 5 {
			t.Fatalf("Map() returned the internal map")
		}
	})

	bad := []struct {
		name  string
		d     Domain
		parts map[string]uint64
	}{
		{"unknown domain", Domain("bogus"), nil},
		{"unknown domain with partition", Domain("bogus"), map[string]uint64{"": 1}},
		{"empty domain", Domain(""), map[string]uint64{"": 1}},
		{"lsn with partition", DomainLSN, map[string]uint64{"x": 1}},
		{"system with partition", DomainSystem, map[string]uint64{"0": 1}},
		{"kafka empty partition", DomainKafka, map[string]uint64{"": 1}},
		{"kafka empty partition at zero", DomainKafka, map[string]uint64{"": 0}},
		{"mysql empty partition", DomainMySQL, map[string]uint64{"": 1}},
		{"mariadb empty partition", DomainMariaDB, map[string]uint64{"": 1}},
		{"comma", DomainKafka, map[string]uint64{"a,b": 1}},
		{"colon", DomainKafka, map[string]uint64{"a:b": 1}},
		{"quote", DomainKafka, map[string]uint64{`a"b`: 1}},
		{"space", DomainKafka, map[string]uint64{"a b": 1}},
		{"tab", DomainKafka, map[string]uint64{"a\tb": 1}},
		{"newline", DomainKafka, map[string]uint64{"a\n": 1}},
		{"carriage return", DomainKafka, map[string]uint64{"\ra": 1}},
		{"vertical tab", DomainKafka, map[string]uint64{"\va": 1}},
		{"form feed", DomainKafka, map[string]uint64{"\fa": 1}},
		{"no-break space", DomainKafka, map[string]uint64{"\u00a0a": 1}},
		{"next line", DomainKafka, map[string]uint64{"a\u0085": 1}},
		{"ideographic space", DomainKafka, map[string]uint64{"\u3000a": 1}},
		{"nul", DomainKafka, map[string]uint64{"a\x00": 1}},
		{"escape", DomainKafka, map[string]uint64{"\x1b[0m": 1}},
		{"invalid utf-8", DomainKafka, map[string]uint64{"a\xff": 1}},
		{"one good one bad", DomainKafka, map[string]uint64{"0": 1, "": 1}},
		{"mariadb not a number", DomainMariaDB, map[string]uint64{"a": 1}},
		{"mariadb negative", DomainMariaDB, map[string]uint64{"-1": 1}},
		{"mariadb plus", DomainMariaDB, map[string]uint64{"+1": 1}},
		{"mariadb too big", DomainMariaDB, map[string]uint64{"4294967296": 1}},
		{"mariadb leading zero", DomainMariaDB, map[string]uint64{"007": 1}},
		{"mariadb double zero", DomainMariaDB, map[string]uint64{"00": 1}},
		{"mariadb space", DomainMariaDB, map[string]uint64{" 7": 1}},
		{"mysql uppercase uuid", DomainMySQL, map[string]uint64{u1Upper: 1}},
		{"mysql bad uuid", DomainMySQL, map[string]uint64{"not-a-uuid": 1}},
		{"mysql short uuid", DomainMySQL, map[string]uint64{u1[:35]: 1}},
		{"mysql uuid with interval", DomainMySQL, map[string]uint64{u1 + ":1": 1}},
	}
	for _, c := range bad {
		t.Run("bad/"+c.name, func(t *testing.T) {
			if f, err := New(c.d, c.parts); err == nil {
				t.Fatalf("New(%q, %v) = %v, want an error", c.d, c.parts, f.Map())
			}
		})
	}
}

func TestEmptyAndSingle(t *testing.T) {
	for _, d := range Domains {
		t.Run(string(d), func(t *testing.T) {
			e := Empty(d)
			if e.Domain() != d || !e.IsEmpty() || e.Len() != 0 || len(e.Partitions()) != 0 || len(e.Map()) != 0 {
				t.Fatalf("Empty(%s) = %v", d, e.Map())
			}
			if !e.Equal(mustNew(t, d, nil)) {
				t.Fatalf("Empty(%s) != New(%s, nil)", d, d)
			}
		})
	}
	s := Single(DomainLSN, 42)
	if s.Pos() != 42 || s.Get("") != 42 || s.Len() != 1 || s.Domain() != DomainLSN {
		t.Errorf("Single(lsn, 42) = %v", s.Map())
	}
	if z := Single(DomainSystem, 0); !z.IsEmpty() || !z.Equal(Empty(DomainSystem)) {
		t.Errorf("Single(system_ms, 0) = %v, want empty", z.Map())
	}
	checkInvariant(t, s)
	checkInvariant(t, Single(DomainSystem, 0))
}

func TestGetWithPartitions(t *testing.T) {
	f := kf(t, "10", 1, "2", 5, "1", 3)
	t.Run("get", func(t *testing.T) {
		for p, want := range map[string]uint64{"10": 1, "2": 5, "1": 3, "0": 0, "3": 0, "": 0} {
			if got := f.Get(p); got != want {
				t.Errorf("Get(%q) = %d, want %d", p, got, want)
			}
		}
	})
	t.Run("natural order", func(t *testing.T) {
		if got, want := f.Partitions(), []string{"1", "2", "10"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("Partitions() = %v, want %v", got, want)
		}
	})
	t.Run("numbers before names", func(t *testing.T) {
		g := kf(t, "b", 1, "10", 1, "a", 1, "9", 1, "-1", 1, "010", 1)
		// "9" < "10" == "010" numerically (ties by text), then names lexically.
		if got, want := g.Partitions(), []string{"9", "010", "10", "-1", "a", "b"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("Partitions() = %v, want %v", got, want)
		}
	})
	t.Run("mysql lexical", func(t *testing.T) {
		g := mustNew(t, DomainMySQL, map[string]uint64{u2: 1, u1: 1})
		if got, want := g.Partitions(), []string{u1, u2}; !reflect.DeepEqual(got, want) {
			t.Fatalf("Partitions() = %v, want %v", got, want)
		}
	})
	t.Run("with sets", func(t *testing.T) {
		g := f.With("2", 9).With("7", 4)
		if g.Get("2") != 9 || g.Get("7") != 4 || g.Len() != 4 {
			t.Fatalf("With: %v", g.Map())
		}
		if f.Get("2") != 5 || f.Get("7") != 0 || f.Len() != 3 {
			t.Fatalf("With changed its receiver: %v", f.Map())
		}
		checkInvariant(t, g)
	})
	t.Run("with lowers", func(t *testing.T) {
		if g := f.With("2", 1); g.Get("2") != 1 {
			t.Fatalf("With(2, 1): %v", g.Map())
		}
	})
	t.Run("with zero deletes", func(t *testing.T) {
		g := f.With("2", 0)
		if g.Len() != 2 || g.Get("2") != 0 {
			t.Fatalf("With(2, 0): %v", g.Map())
		}
		e := kf(t, "0", 1).With("0", 0)
		if !e.IsEmpty() || !e.Equal(Empty(DomainKafka)) {
			t.Fatalf("With to zero of last partition: %v", e.Map())
		}
		checkInvariant(t, e)
	})
	t.Run("with unpartitioned", func(t *testing.T) {
		g := Empty(DomainLSN).With("", 7)
		if g.Pos() != 7 || !g.Equal(Single(DomainLSN, 7)) {
			t.Fatalf("With on lsn: %v", g.Map())
		}
	})
	for _, c := range []struct {
		name string
		f    Frontier
		p    string
	}{
		{"kafka empty", f, ""},
		{"kafka colon", f, "a:b"},
		{"lsn named", Empty(DomainLSN), "x"},
		{"mysql uppercase", Empty(DomainMySQL), u1Upper},
		{"mariadb name", Empty(DomainMariaDB), "x"},
	} {
		t.Run("with panics/"+c.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("With(%q) did not panic", c.p)
				}
			}()
			c.f.With(c.p, 1)
		})
	}
}

func TestBeyond(t *testing.T) {
	f := kf(t, "0", 15, "1", 7)
	cases := []struct {
		name string
		t    Time
		want bool
	}{
		{"below", Time{"0", 3}, true},
		{"just below upper", Time{"0", 14}, true},
		{"at upper", Time{"0", 15}, false},
		{"above upper", Time{"0", 16}, false},
		{"other partition below", Time{"1", 6}, true},
		{"other partition at upper", Time{"1", 7}, false},
		{"absent partition at 0", Time{"2", 0}, false},
		{"absent partition", Time{"2", 5}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := f.Beyond(c.t); got != c.want {
				t.Fatalf("Beyond(%v) = %v, want %v", c.t, got, c.want)
			}
		})
	}
	t.Run("lsn", func(t *testing.T) {
		// Measured with synchronous_commit=off: the WAL write position was
		// 0/3920EAC8 while a visible commit's record ended at 0/3920EB38.
		// An upper at the write position is beyond none of the positions
		// in between; an upper at the record's end (the insert position)
		// is beyond all of them.
		write, _ := ParseLSN("0/3920EAC8")
		end, _ := ParseLSN("0/3920EB38")
		for pos := uint64(write); pos < uint64(end); pos++ {
			tm := Time{Pos: pos}
			if Single(DomainLSN, uint64(write)).Beyond(tm) {
				t.Fatalf("write position beyond %v", LSN(pos))
			}
			if !Single(DomainLSN, uint64(end)).Beyond(tm) {
				t.Fatalf("insert position not beyond %v", LSN(pos))
			}
		}
		if Single(DomainLSN, uint64(end)).Beyond(Time{Pos: uint64(end)}) {
			t.Errorf("an upper is beyond its own position")
		}
	})
	t.Run("empty is beyond nothing", func(t *testing.T) {
		if Empty(DomainLSN).Beyond(Time{}) || Empty(DomainKafka).Beyond(Time{"0", 0}) {
			t.Fatal("empty frontier beyond time 0")
		}
	})
}

func TestEqual(t *testing.T) {
	a := kf(t, "0", 15, "1", 7)
	cases := []struct {
		name string
		b    Frontier
		want bool
	}{
		{"same", kf(t, "1", 7, "0", 15), true},
		{"same with zero entries", mustNew(t, DomainKafka, map[string]uint64{"0": 15, "1": 7, "2": 0}), true},
		{"different value", kf(t, "0", 15, "1", 8), false},
		{"missing partition", kf(t, "0", 15), false},
		{"extra partition", kf(t, "0", 15, "1", 7, "2", 1), false},
		{"same length different partition", kf(t, "0", 15, "2", 7), false},
		{"other domain same text", mustNew(t, DomainMariaDB, map[string]uint64{"0": 15, "1": 7}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := a.Equal(c.b); got != c.want {
				t.Fatalf("Equal = %v, want %v", got, c.want)
			}
			if got := c.b.Equal(a); got != c.want {
				t.Fatalf("Equal is not symmetric")
			}
		})
	}
	if Empty(DomainLSN).Equal(Empty(DomainSystem)) {
		t.Error("empty frontiers of different domains are equal")
	}
	if !Empty(DomainLSN).Equal(Single(DomainLSN, 0)) {
		t.Error("Empty(lsn) != Single(lsn, 0)")
	}
}

func TestCovers(t *testing.T) {
	cases := []struct {
		name          string
		upper, target Frontier
		want          bool
	}{
		{"equal", kf(t, "0", 5), kf(t, "0", 5), true},
		{"greater", kf(t, "0", 6), kf(t, "0", 5), true},
		{"less", kf(t, "0", 4), kf(t, "0", 5), false},
		{"absent target partition is 0", kf(t, "0", 5, "1", 1), kf(t, "0", 5), true},
		{"absent upper partition is 0", kf(t, "0", 5), kf(t, "0", 5, "1", 1), false},
		{"anything covers empty", kf(t, "3", 1), Empty(DomainKafka), true},
		{"empty covers empty", Empty(DomainKafka), Empty(DomainKafka), true},
		{"empty covers nothing else", Empty(DomainKafka), kf(t, "0", 1), false},
		{"incomparable one way", kf(t, "0", 5, "1", 1), kf(t, "0", 1, "1", 5), false},
		{"incomparable other way", kf(t, "0", 1, "1", 5), kf(t, "0", 5, "1", 1), false},
		{"disjoint partitions", kf(t, "0", 5), kf(t, "1", 5), false},
		{"lsn", Single(DomainLSN, 10), Single(DomainLSN, 9), true},
		{"lsn less", Single(DomainLSN, 9), Single(DomainLSN, 10), false},
		{"different domains", Single(DomainLSN, 10), Single(DomainSystem, 1), false},
		{"different domains both empty", Empty(DomainLSN), Empty(DomainSystem), false},
		{"different partitioned domains", kf(t, "0", 9), mustNew(t, DomainMariaDB, map[string]uint64{"0": 1}), false},
		{"mysql next 1 covers absent", mustNew(t, DomainMySQL, map[string]uint64{u1: 1}), Empty(DomainMySQL), true},
		{"absent does not cover mysql next 1", Empty(DomainMySQL), mustNew(t, DomainMySQL, map[string]uint64{u1: 1}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Covers(c.upper, c.target); got != c.want {
				t.Fatalf("Covers(%v, %v) = %v, want %v", c.upper, c.target, got, c.want)
			}
			if got := c.upper.Covers(c.target); got != c.want {
				t.Fatalf("method Covers = %v, want %v", got, c.want)
			}
		})
	}
	t.Run("partial order", func(t *testing.T) {
		fs := sampleKafka(t)
		for _, a := range fs {
			if !Covers(a, a) {
				t.Errorf("not reflexive at %v", a)
			}
			for _, b := range fs {
				if Covers(a, b) && Covers(b, a) && !a.Equal(b) {
					t.Errorf("not antisymmetric: %v, %v", a, b)
				}
				for _, c := range fs {
					if Covers(a, b) && Covers(b, c) && !Covers(a, c) {
						t.Errorf("not transitive: %v >= %v >= %v", a, b, c)
					}
				}
			}
		}
	})
	t.Run("some pairs incomparable", func(t *testing.T) {
		a, b := kf(t, "0", 2), kf(t, "1", 2)
		if Covers(a, b) || Covers(b, a) {
			t.Fatal("expected an incomparable pair")
		}
	})
}

// sampleKafka is a small set of kafka frontiers with comparable and
// incomparable pairs.
func sampleKafka(t testing.TB) []Frontier {
	return []Frontier{
		Empty(DomainKafka),
		kf(t, "0", 1),
		kf(t, "0", 5),
		kf(t, "1", 5),
		kf(t, "0", 5, "1", 1),
		kf(t, "0", 1, "1", 5),
		kf(t, "0", 5, "1", 5),
		kf(t, "0", 7, "1", 2, "10", 3),
		kf(t, "10", 3),
	}
}

func TestLag(t *testing.T) {
	cases := []struct {
		name        string
		upper, have Frontier
		want        uint64
	}{
		{"caught up", kf(t, "0", 5, "1", 7), kf(t, "0", 5, "1", 7), 0},
		{"ahead of upper", kf(t, "0", 5), kf(t, "0", 9), 0},
		{"summed over partitions", kf(t, "0", 15, "1", 7), kf(t, "0", 10, "1", 4), 8},
		{"a partition have lacks counts from 0", kf(t, "0", 5, "1", 3), kf(t, "0", 5), 3},
		{"a partition ahead does not offset one behind", kf(t, "0", 5, "1", 3), kf(t, "0", 9, "1", 1), 2},
		{"nothing ingested", kf(t, "0", 4, "1", 2), Empty(DomainKafka), 6},
		{"lsn bytes", Single(DomainLSN, 0x16B3748), Single(DomainLSN, 0x16B3700), 0x48},
		{"mariadb transactions", mustNew(t, DomainMariaDB, map[string]uint64{"0": 43, "1": 8}), mustNew(t, DomainMariaDB, map[string]uint64{"0": 40, "1": 8}), 3},
		{"empty upper", Empty(DomainLSN), Single(DomainLSN, 10), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Lag(c.upper, c.have)
			if err != nil || got != c.want {
				t.Fatalf("Lag(%v, %v) = %d, %v, want %d", c.upper, c.have, got, err, c.want)
			}
			if (got == 0) != c.have.Covers(c.upper) {
				t.Fatalf("Lag %d but Covers %v", got, c.have.Covers(c.upper))
			}
		})
	}
	t.Run("different domains", func(t *testing.T) {
		if _, err := Lag(Single(DomainLSN, 10), kf(t, "0", 1)); !errors.Is(err, ErrDomainMismatch) {
			t.Fatalf("Lag across domains: %v, want ErrDomainMismatch", err)
		}
	})
}

func TestDomainUnit(t *testing.T) {
	want := map[Domain]string{DomainLSN: "WAL bytes", DomainMySQL: "transactions", DomainMariaDB: "transactions", DomainKafka: "records", DomainSystem: "ms"}
	for _, d := range Domains {
		if got := d.Unit(); got != want[d] {
			t.Errorf("%s.Unit() = %q, want %q", d, got, want[d])
		}
	}
}

func TestJoinMeet(t *testing.T) {
	cases := []struct {
		name           string
		a, b           Frontier
		join, meet     Frontier
		joinAs, meetAs string
	}{
		{name: "disjoint", a: kf(t, "0", 5), b: kf(t, "1", 3),
			join: kf(t, "0", 5, "1", 3), meet: Empty(DomainKafka)},
		{name: "overlapping", a: kf(t, "0", 5, "1", 1), b: kf(t, "0", 2, "1", 9, "2", 4),
			join: kf(t, "0", 5, "1", 9, "2", 4), meet: kf(t, "0", 2, "1", 1)},
		{name: "with empty", a: kf(t, "0", 5), b: Empty(DomainKafka),
			join: kf(t, "0", 5), meet: Empty(DomainKafka)},
		{name: "both empty", a: Empty(DomainKafka), b: Empty(DomainKafka),
			join: Empty(DomainKafka), meet: Empty(DomainKafka)},
		{name: "lsn", a: Single(DomainLSN, 10), b: Single(DomainLSN, 20),
			join: Single(DomainLSN, 20), meet: Single(DomainLSN, 10)},
		{name: "mysql", a: mustNew(t, DomainMySQL, map[string]uint64{u1: 6}), b: mustNew(t, DomainMySQL, map[string]uint64{u1: 3, u2: 1}),
			join: mustNew(t, DomainMySQL, map[string]uint64{u1: 6, u2: 1}), meet: mustNew(t, DomainMySQL, map[string]uint64{u1: 3})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, ab := range [][2]Frontier{{c.a, c.b}, {c.b, c.a}} {
				j, err := Join(ab[0], ab[1])
				if err != nil {
					t.Fatal(err)
				}
				m, err := Meet(ab[0], ab[1])
				if err != nil {
					t.Fatal(err)
				}
				if !j.Equal(c.join) {
					t.Errorf("Join(%v, %v) = %v, want %v", ab[0], ab[1], j, c.join)
				}
				if !m.Equal(c.meet) {
					t.Errorf("Meet(%v, %v) = %v, want %v", ab[0], ab[1], m, c.meet)
				}
				checkInvariant(t, j)
				checkInvariant(t, m)
			}
		})
	}
	t.Run("arguments unchanged", func(t *testing.T) {
		a, b := kf(t, "0", 5, "1", 1), kf(t, "0", 2, "1", 9)
		if _, err := Join(a, b); err != nil {
			t.Fatal(err)
		}
		if _, err := Meet(a, b); err != nil {
			t.Fatal(err)
		}
		if !a.Equal(kf(t, "0", 5, "1", 1)) || !b.Equal(kf(t, "0", 2, "1", 9)) {
			t.Fatalf("Join or Meet changed an argument: %v %v", a, b)
		}
	})
	t.Run("domain mismatch", func(t *testing.T) {
		a, b := Single(DomainLSN, 1), Single(DomainSystem, 1)
		if _, err := Join(a, b); !errors.Is(err, ErrDomainMismatch) {
			t.Errorf("Join across domains: %v", err)
		}
		if _, err := Meet(a, b); !errors.Is(err, ErrDomainMismatch) {
			t.Errorf("Meet across domains: %v", err)
		}
		if _, err := Join(Empty(DomainKafka), Empty(DomainMariaDB)); !errors.Is(err, ErrDomainMismatch) {
			t.Errorf("Join of empty frontiers across domains: %v", err)
		}
	})
	t.Run("lattice laws", func(t *testing.T) {
		fs := sampleKafka(t)
		for _, a := range fs {
			for _, b := range fs {
				checkPairLaws(t, a, b)
				for _, c := range fs {
					checkAssociative(t, a, b, c)
				}
			}
		}
	})
}

func join(t testing.TB, a, b Frontier) Frontier {
	t.Helper()
	j, err := Join(a, b)
	if err != nil {
		t.Fatalf("Join(%v, %v): %v", a, b, err)
	}
	return j
}

func meet(t testing.TB, a, b Frontier) Frontier {
	t.Helper()
	m, err := Meet(a, b)
	if err != nil {
		t.Fatalf("Meet(%v, %v): %v", a, b, err)
	}
	return m
}

// checkPairLaws checks the lattice laws that involve one or two frontiers.
func checkPairLaws(t testing.TB, a, b Frontier) {
	t.Helper()
	j, m := join(t, a, b), meet(t, a, b)
	checkInvariant(t, j)
	checkInvariant(t, m)
	if !j.Equal(join(t, b, a)) {
		t.Errorf("Join not commutative: %v, %v", a, b)
	}
	if !m.Equal(meet(t, b, a)) {
		t.Errorf("Meet not commutative: %v, %v", a, b)
	}
	if !join(t, a, a).Equal(a) || !meet(t, a, a).Equal(a) {
		t.Errorf("Join or Meet not idempotent at %v", a)
	}
	if !join(t, a, m).Equal(a) {
		t.Errorf("absorption a v (a ^ b) = a fails: %v, %v", a, b)
	}
	if !meet(t, a, j).Equal(a) {
		t.Errorf("absorption a ^ (a v b) = a fails: %v, %v", a, b)
	}
	if !Covers(j, a) || !Covers(j, b) {
		t.Errorf("Join(%v, %v) = %v does not cover both", a, b, j)
	}
	if !Covers(a, m) || !Covers(b, m) {
		t.Errorf("Meet(%v, %v) = %v not covered by both", a, b, m)
	}
	if Covers(a, b) != j.Equal(a) {
		t.Errorf("Covers(%v, %v) = %v but Join = %v", a, b, Covers(a, b), j)
	}
	if Covers(a, b) != m.Equal(b) {
		t.Errorf("Covers(%v, %v) = %v but Meet = %v", a, b, Covers(a, b), m)
	}
}

func checkAssociative(t testing.TB, a, b, c Frontier) {
	t.Helper()
	if !join(t, join(t, a, b), c).Equal(join(t, a, join(t, b, c))) {
		t.Errorf("Join not associative: %v %v %v", a, b, c)
	}
	if !meet(t, meet(t, a, b), c).Equal(meet(t, a, meet(t, b, c))) {
		t.Errorf("Meet not associative: %v %v %v", a, b, c)
	}
	// Least upper bound: anything covering a and b covers their join.
	if Covers(c, a) && Covers(c, b) && !Covers(c, join(t, a, b)) {
		t.Errorf("Join(%v, %v) is not least: %v covers both", a, b, c)
	}
	if Covers(a, c) && Covers(b, c) && !Covers(meet(t, a, b), c) {
		t.Errorf("Meet(%v, %v) is not greatest: %v is below both", a, b, c)
	}
}

func TestStringParse(t *testing.T) {
	cases := []struct {
		name string
		f    Frontier
		text string
	}{
		{"lsn empty", Empty(DomainLSN), "0/0"},
		{"lsn", Single(DomainLSN, 0x16B3748), "0/16B3748"},
		{"lsn max", Single(DomainLSN, ^uint64(0)), "FFFFFFFF/FFFFFFFF"},
		{"system empty", Empty(DomainSystem), "0"},
		{"system", Single(DomainSystem, 1732900000000), "1732900000000"},
		{"system max", Single(DomainSystem, ^uint64(0)), "18446744073709551615"},
		{"kafka empty", Empty(DomainKafka), ""},
		{"kafka", kf(t, "0", 15, "1", 7), "0:15,1:7"},
		{"kafka natural order", kf(t, "10", 1, "2", 2), "2:2,10:1"},
		{"kafka names", kf(t, "b", 1, "a.b-c_d", 2, "3", 3), "3:3,a.b-c_d:2,b:1"},
		{"kafka max", kf(t, "0", 0).With("0", ^uint64(0)), "0:18446744073709551615"},
		{"mariadb empty", Empty(DomainMariaDB), ""},
		{"mariadb", mustNew(t, DomainMariaDB, map[string]uint64{"0": 43, "1": 8}), "0:43,1:8"},
		{"mysql empty", Empty(DomainMySQL), ""},
		{"mysql", mustNew(t, DomainMySQL, map[string]uint64{u1: 6}), u1 + ":1-5"},
		{"mysql next 2", mustNew(t, DomainMySQL, map[string]uint64{u1: 2}), u1 + ":1-1"},
		{"mysql next 1", mustNew(t, DomainMySQL, map[string]uint64{u1: 1}), u1 + "=1"},
		{"mysql two sorted", mustNew(t, DomainMySQL, map[string]uint64{u2: 1, u1: 10}), u1 + ":1-9," + u2 + "=1"},
		{"mysql max", mustNew(t, DomainMySQL, map[string]uint64{u1: ^uint64(0)}), u1 + ":1-18446744073709551614"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.f.String(); got != c.text {
				t.Fatalf("String() = %q, want %q", got, c.text)
			}
			g, err := Parse(c.f.Domain(), c.text)
			if err != nil {
				t.Fatalf("Parse(%s, %q): %v", c.f.Domain(), c.text, err)
			}
			if !g.Equal(c.f) {
				t.Fatalf("Parse(%s, %q) = %v, want %v", c.f.Domain(), c.text, g.Map(), c.f.Map())
			}
			checkInvariant(t, g)
		})
	}
	// A mysql frontier's text is a GTID set MySQL understands (except for
	// the "uuid=1" form).
	t.Run("mysql text is a gtid set", func(t *testing.T) {
		f := mustNew(t, DomainMySQL, map[string]uint64{u1: 6, u2: 3})
		s, err := ParseGTIDSet(f.String())
		if err != nil {
			t.Fatal(err)
		}
		if !s.Upper().Equal(f) || !GTIDSetOf(f).Equal(s) {
			t.Fatalf("gtid set %q, upper %v", s, s.Upper().Map())
		}
	})
}

func TestParseLenient(t *testing.T) {
	// Inputs that are not the canonical String form but parse.
	cases := []struct {
		name string
		d    Domain
		in   string
		want Frontier
	}{
		{"lsn surrounding space", DomainLSN, " 0/16b3748\n", Single(DomainLSN, 0x16B3748)},
		{"system leading zeros", DomainSystem, "007", Single(DomainSystem, 7)},
		{"kafka spaces after commas", DomainKafka, "0:15, 1:7", kf(t, "0", 15, "1", 7)},
		{"kafka unsorted", DomainKafka, "1:7,0:15", kf(t, "0", 15, "1", 7)},
		{"kafka zero dropped", DomainKafka, "0:0,1:7", kf(t, "1", 7)},
		{"mariadb multi-line", DomainMariaDB, "0:43,\n1:8", mustNew(t, DomainMariaDB, map[string]uint64{"0": 43, "1": 8})},
		{"mysql uppercase", DomainMySQL, u1Upper + ":1-5", mustNew(t, DomainMySQL, map[string]uint64{u1: 6})},
		{"mysql uppercase =1", DomainMySQL, u1Upper + "=1", mustNew(t, DomainMySQL, map[string]uint64{u1: 1})},
		{"mysql split prefix", DomainMySQL, u1 + ":1-3:4-5", mustNew(t, DomainMySQL, map[string]uint64{u1: 6})},
		{"mysql single 1", DomainMySQL, u1 + ":1", mustNew(t, DomainMySQL, map[string]uint64{u1: 2})},
		{"mysql gtid_executed", DomainMySQL, u1 + ":1-5,\n" + u2 + ":1-3", mustNew(t, DomainMySQL, map[string]uint64{u1: 6, u2: 4})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Parse(c.d, c.in)
			if err != nil {
				t.Fatalf("Parse(%s, %q): %v", c.d, c.in, err)
			}
			if !g.Equal(c.want) {
				t.Fatalf("Parse(%s, %q) = %v, want %v", c.d, c.in, g.Map(), c.want.Map())
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		d    Domain
		in   string
	}{
		{"unknown domain", Domain("bogus"), "1"},
		{"empty domain", Domain(""), ""},
		{"lsn empty", DomainLSN, ""},
		{"lsn decimal", DomainLSN, "12345"},
		{"lsn garbage", DomainLSN, "0/1x"},
		{"system empty", DomainSystem, ""},
		{"system negative", DomainSystem, "-1"},
		{"system lsn", DomainSystem, "0/1"},
		{"system overflow", DomainSystem, "18446744073709551616"},
		{"kafka no colon", DomainKafka, "0"},
		{"kafka empty partition", DomainKafka, ":5"},
		{"kafka empty position", DomainKafka, "0:"},
		{"kafka negative", DomainKafka, "0:-1"},
		{"kafka two colons", DomainKafka, "0:1:2"},
		{"kafka duplicate", DomainKafka, "0:1,0:2"},
		{"kafka duplicate zero", DomainKafka, "0:0,0:2"},
		{"kafka trailing comma", DomainKafka, "0:1,"},
		{"kafka empty item", DomainKafka, "0:1,,1:2"},
		{"kafka space in partition", DomainKafka, "0 :1"},
		{"kafka space in position", DomainKafka, "0: 1"},
		{"kafka quote", DomainKafka, `"0":1`},
		{"mariadb name", DomainMariaDB, "x:1"},
		{"mariadb leading zero", DomainMariaDB, "01:1"},
		{"mariadb gtid position", DomainMariaDB, "0-1-42"},
		{"mariadb too big", DomainMariaDB, "4294967296:1"},
		{"mysql gap", DomainMySQL, u1 + ":1-5:7-9"},
		{"mysql not from 1", DomainMySQL, u1 + ":2-5"},
		{"mysql duplicate", DomainMySQL, u1 + ":1-5," + u1 + ":1-6"},
		{"mysql duplicate other case", DomainMySQL, u1 + ":1-5," + u1Upper + "=1"},
		{"mysql duplicate =1", DomainMySQL, u1 + "=1," + u1 + "=1"},
		{"mysql =2", DomainMySQL, u1 + "=2"},
		{"mysql =0", DomainMySQL, u1 + "=0"},
		{"mysql = empty", DomainMySQL, u1 + "="},
		{"mysql =1 bad uuid", DomainMySQL, "abc=1"},
		{"mysql kafka form", DomainMySQL, "0:15"},
		{"mysql bad uuid", DomainMySQL, "abc:1-5"},
		{"mysql zero", DomainMySQL, u1 + ":0"},
		{"mysql trailing comma", DomainMySQL, u1 + ":1-5,"},
		{"mysql empty item", DomainMySQL, u1 + ":1-5,," + u2 + ":1-3"},
		{"mysql blank item", DomainMySQL, u1 + ":1-5, \n," + u2 + ":1-3"},
		{"mysql missing interval", DomainMySQL, u1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if f, err := Parse(c.d, c.in); err == nil {
				t.Fatalf("Parse(%q, %q) = %v, want an error", c.d, c.in, f.Map())
			}
		})
	}
}

func TestJSON(t *testing.T) {
	cases := []struct {
		name string
		f    Frontier
		json string
	}{
		{"kafka", kf(t, "0", 15, "1", 7),
			`{"domain":"kafka","text":"0:15,1:7","upper":{"0":15,"1":7}}`},
		{"kafka keys sorted as strings, text naturally", kf(t, "10", 1, "2", 2),
			`{"domain":"kafka","text":"2:2,10:1","upper":{"10":1,"2":2}}`},
		{"kafka empty", Empty(DomainKafka),
			`{"domain":"kafka","text":"","upper":{}}`},
		{"lsn", Single(DomainLSN, 0x16B3748),
			`{"domain":"lsn","text":"0/16B3748","upper":{"":23803720}}`},
		{"lsn empty", Empty(DomainLSN),
			`{"domain":"lsn","text":"0/0","upper":{}}`},
		{"system", Single(DomainSystem, 1732900000000),
			`{"domain":"system_ms","text":"1732900000000","upper":{"":1732900000000}}`},
		{"mariadb", mustNew(t, DomainMariaDB, map[string]uint64{"0": 43, "1": 8}),
			`{"domain":"mariadb","text":"0:43,1:8","upper":{"0":43,"1":8}}`},
		{"mysql", mustNew(t, DomainMySQL, map[string]uint64{u1: 6, u2: 1}),
			`{"domain":"mysql","text":"` + u1 + `:1-5,` + u2 + `=1","upper":{"` + u1 + `":6,"` + u2 + `":1}}`},
		{"max", Single(DomainSystem, ^uint64(0)),
			`{"domain":"system_ms","text":"18446744073709551615","upper":{"":18446744073709551615}}`},
		{"html characters escaped", kf(t, "a<b>&", 1),
			`{"domain":"kafka","text":"a\u003cb\u003e\u0026:1","upper":{"a\u003cb\u003e\u0026":1}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.f)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.json {
				t.Fatalf("Marshal = %s\nwant      %s", b, c.json)
			}
			var g Frontier
			if err := json.Unmarshal(b, &g); err != nil {
				t.Fatalf("Unmarshal(%s): %v", b, err)
			}
			if !g.Equal(c.f) {
				t.Fatalf("round trip = %v, want %v", g.Map(), c.f.Map())
			}
			checkInvariant(t, g)
			// Pointer and value marshal alike; in a struct too.
			pb, err := json.Marshal(&c.f)
			if err != nil || string(pb) != c.json {
				t.Fatalf("Marshal(&f) = %s, %v", pb, err)
			}
			bb, err := json.Marshal(Binding{Time: 5, Frontier: c.f})
			if err != nil || string(bb) != `{"Time":5,"Frontier":`+c.json+`}` {
				t.Fatalf("Marshal(Binding) = %s, %v", bb, err)
			}
			var bd Binding
			if err := json.Unmarshal(bb, &bd); err != nil || bd.Time != 5 || !bd.Frontier.Equal(c.f) {
				t.Fatalf("Unmarshal(Binding) = %v, %v", bd, err)
			}
		})
	}
}

func TestUnmarshalJSON(t *testing.T) {
	good := []struct {
		name, in string
		want     Frontier
	}{
		{"text ignored", `{"domain":"kafka","text":"nonsense","upper":{"0":3}}`, kf(t, "0", 3)},
		{"text absent", `{"domain":"kafka","upper":{"0":3}}`, kf(t, "0", 3)},
		{"upper absent", `{"domain":"kafka"}`, Empty(DomainKafka)},
		{"upper null", `{"domain":"lsn","upper":null}`, Empty(DomainLSN)},
		{"zero dropped", `{"domain":"kafka","upper":{"0":0,"1":2}}`, kf(t, "1", 2)},
		{"unknown field ignored", `{"domain":"kafka","upper":{"0":3},"extra":1}`, kf(t, "0", 3)},
		{"white space", " {\n \"domain\" : \"mariadb\" , \"upper\" : { \"7\" : 1 } }\n", mustNew(t, DomainMariaDB, map[string]uint64{"7": 1})},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			var f Frontier
			if err := json.Unmarshal([]byte(c.in), &f); err != nil {
				t.Fatalf("Unmarshal(%s): %v", c.in, err)
			}
			if !f.Equal(c.want) {
				t.Fatalf("Unmarshal(%s) = %v, want %v", c.in, f.Map(), c.want.Map())
			}
		})
	}
	bad := []struct{ name, in string }{
		{"unknown domain", `{"domain":"postgres","upper":{"":1}}`},
		{"no domain", `{"upper":{"":1}}`},
		{"empty domain", `{"domain":"","text":"","upper":{}}`},
		{"domain not a string", `{"domain":1,"upper":{}}`},
		{"kafka empty partition", `{"domain":"kafka","upper":{"":1}}`},
		{"kafka reserved character", `{"domain":"kafka","upper":{"a:b":1}}`},
		{"kafka escaped newline", `{"domain":"kafka","upper":{"a\nb":1}}`},
		{"lsn partition", `{"domain":"lsn","upper":{"x":1}}`},
		{"system partition", `{"domain":"system_ms","upper":{"0":1}}`},
		{"mariadb name", `{"domain":"mariadb","upper":{"x":1}}`},
		{"mysql uppercase", `{"domain":"mysql","upper":{"` + u1Upper + `":1}}`},
		{"mysql bad uuid", `{"domain":"mysql","upper":{"x":1}}`},
		{"negative", `{"domain":"kafka","upper":{"0":-1}}`},
		{"fraction", `{"domain":"kafka","upper":{"0":1.5}}`},
		{"overflow", `{"domain":"kafka","upper":{"0":18446744073709551616}}`},
		{"string upper", `{"domain":"kafka","upper":{"0":"1"}}`},
		{"upper array", `{"domain":"kafka","upper":[1]}`},
		{"torn", `{"domain":"kafka","upper":{"0":1`},
		{"not an object", `"kafka"`},
		{"null", `null`},
		{"empty", ``},
		{"trailing garbage", `{"domain":"kafka","upper":{}}x`},
	}
	for _, c := range bad {
		t.Run("bad/"+c.name, func(t *testing.T) {
			f := kf(t, "9", 9)
			err := json.Unmarshal([]byte(c.in), &f)
			if c.name == "null" {
				// A JSON null is a no-op, as encoding/json's
				// convention asks.
				if err != nil || !f.Equal(kf(t, "9", 9)) {
					t.Fatalf("Unmarshal(null) = %v, %v", f.Map(), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Unmarshal(%s) = %v, want an error", c.in, f.Map())
			}
			if !f.Equal(kf(t, "9", 9)) {
				t.Fatalf("failed Unmarshal changed the frontier to %v", f.Map())
			}
		})
	}
	t.Run("null is a no-op", func(t *testing.T) {
		f := kf(t, "9", 9)
		if err := f.UnmarshalJSON([]byte("null")); err != nil || !f.Equal(kf(t, "9", 9)) {
			t.Fatalf("UnmarshalJSON(null) = %v, %v", f.Map(), err)
		}
		var b Binding
		if err := json.Unmarshal([]byte(`{"Time":3,"Frontier":null}`), &b); err != nil || b.Time != 3 || b.Frontier.Domain() != "" {
			t.Fatalf("Binding with null frontier: %v, %v", b, err)
		}
	})
}

func TestValueSemantics(t *testing.T) {
	// Frontiers share nothing: operations never change their arguments.
	a := kf(t, "0", 5, "1", 3)
	orig := a.Map()
	_ = a.With("0", 100)
	_ = a.With("1", 0)
	_, _ = Join(a, kf(t, "0", 50, "2", 1))
	_, _ = Meet(a, kf(t, "0", 1))
	m := a.Map()
	m["0"] = 77
	ps := a.Partitions()
	ps[0] = "x"
	if !reflect.DeepEqual(a.Map(), orig) {
		t.Fatalf("frontier changed to %v, was %v", a.Map(), orig)
	}
	j := join(t, a, Empty(DomainKafka))
	j2 := j.With("0", 1)
	if a.Get("0") != 5 || j.Get("0") != 5 || j2.Get("0") != 1 {
		t.Fatalf("Join result aliases its argument")
	}
}

func TestErrorMessagesNameTheInput(t *testing.T) {
	// Errors are for people: they quote what was wrong.
	checks := []struct {
		err  error
		want string
	}{
		{errOf(ParseLSN("G/1")), `"G/1"`},
		{errOf2(ParseGTIDSet(u1 + ":5-3")), `"5-3"`},
		{errOf3(ParseMariaDBPos("0-1-42,0-2-43")), "domain 0 appears twice"},
		{errOf4(New(DomainKafka, map[string]uint64{"a:b": 1})), `"a:b"`},
		{errOf4(Parse(DomainKafka, "0:x")), `"0:x"`},
	}
	for _, c := range checks {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v does not mention %s", c.err, c.want)
		}
	}
}

func errOf(_ LSN, err error) error         { return err }
func errOf2(_ GTIDSet, err error) error    { return err }
func errOf3(_ MariaDBPos, err error) error { return err }
func errOf4(_ Frontier, err error) error   { return err }
