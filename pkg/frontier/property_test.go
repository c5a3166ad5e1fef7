package frontier

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
)

// randFrontier returns a random frontier of domain d. Partitions come from a
// small pool and positions from a small range (plus the extremes) so that
// equal, comparable and incomparable pairs all occur often.
func randFrontier(t testing.TB, r *rand.Rand, d Domain) Frontier {
	t.Helper()
	var pool []string
	switch d {
	case DomainLSN, DomainSystem:
		pool = []string{""}
	case DomainKafka:
		pool = []string{"0", "1", "2", "10", "topic-a"}
	case DomainMariaDB:
		pool = []string{"0", "1", "7", "4294967295"}
	case DomainMySQL:
		pool = []string{u1, u2, "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"}
	}
	m := map[string]uint64{}
	for _, p := range pool {
		switch r.Intn(8) {
		case 0, 1:
			// absent
		case 2:
			m[p] = 0
		case 3:
			m[p] = ^uint64(0) - uint64(r.Intn(2))
		default:
			m[p] = uint64(1 + r.Intn(4))
		}
	}
	return mustNew(t, d, m)
}

// nudge returns f with one of its partitions moved up or down by one.
func nudge(r *rand.Rand, f Frontier) Frontier {
	ps := f.Partitions()
	if len(ps) == 0 {
		return f
	}
	p := ps[r.Intn(len(ps))]
	v := f.Get(p)
	if r.Intn(2) == 0 && v != ^uint64(0) {
		return f.With(p, v+1)
	}
	return f.With(p, v-1)
}

func TestLatticeProperties(t *testing.T) {
	r := rand.New(rand.NewSource(20241129))
	const rounds = 400
	for _, d := range Domains {
		t.Run(string(d), func(t *testing.T) {
			var comparable, incomparable, equal int
			for i := 0; i < rounds; i++ {
				a, b, c := randFrontier(t, r, d), randFrontier(t, r, d), randFrontier(t, r, d)
				switch r.Intn(4) {
				case 0:
					b = a // equal pairs
				case 1:
					b = nudge(r, a) // often comparable pairs
				}
				checkPairLaws(t, a, b)
				checkAssociative(t, a, b, c)

				// Covers is a partial order.
				if !Covers(a, a) {
					t.Fatalf("Covers not reflexive at %v", a)
				}
				if Covers(a, b) && Covers(b, a) != a.Equal(b) {
					t.Fatalf("Covers not antisymmetric: %v, %v", a, b)
				}
				if Covers(a, b) && Covers(b, c) && !Covers(a, c) {
					t.Fatalf("Covers not transitive: %v, %v, %v", a, b, c)
				}
				// Covers agrees with Join and with the per-partition rule.
				if Covers(a, b) != join(t, a, b).Equal(a) {
					t.Fatalf("Covers(%v, %v) = %v disagrees with Join", a, b, Covers(a, b))
				}
				want := true
				for _, p := range append(a.Partitions(), b.Partitions()...) {
					if a.Get(p) < b.Get(p) {
						want = false
					}
				}
				if Covers(a, b) != want {
					t.Fatalf("Covers(%v, %v) = %v, per-partition rule says %v", a, b, Covers(a, b), want)
				}
				// Beyond agrees with Covers: a covers b iff every time
				// b is beyond, a is beyond too.
				beyondAll := true
				for _, p := range b.Partitions() {
					if !a.Beyond(Time{p, b.Get(p) - 1}) {
						beyondAll = false
					}
				}
				if Covers(a, b) != beyondAll {
					t.Fatalf("Covers(%v, %v) = %v, Beyond says %v", a, b, Covers(a, b), beyondAll)
				}

				// Text and JSON round trips.
				g, err := Parse(d, a.String())
				if err != nil || !g.Equal(a) {
					t.Fatalf("Parse(%s, %q) = %v, %v; want %v", d, a.String(), g.Map(), err, a.Map())
				}
				bs, err := json.Marshal(a)
				if err != nil {
					t.Fatal(err)
				}
				var h Frontier
				if err := json.Unmarshal(bs, &h); err != nil || !h.Equal(a) {
					t.Fatalf("JSON %s = %v, %v", bs, h.Map(), err)
				}

				switch {
				case a.Equal(b):
					equal++
				case Covers(a, b) || Covers(b, a):
					comparable++
				default:
					incomparable++
				}
			}
			// The generator must exercise every case, or the laws above
			// are checked vacuously.
			if equal == 0 || comparable == 0 || (d.Partitioned() && incomparable == 0) {
				t.Fatalf("generator too narrow: %d equal, %d comparable, %d incomparable pairs", equal, comparable, incomparable)
			}
			if !d.Partitioned() && incomparable != 0 {
				t.Fatalf("%d incomparable pairs in a totally ordered domain", incomparable)
			}
		})
	}
}

func TestCrossDomainNeverCovers(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for _, d1 := range Domains {
		for _, d2 := range Domains {
			if d1 == d2 {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", d1, d2), func(t *testing.T) {
				for i := 0; i < 20; i++ {
					a, b := randFrontier(t, r, d1), randFrontier(t, r, d2)
					if Covers(a, b) || a.Equal(b) {
						t.Fatalf("%s %v covers or equals %s %v", d1, a, d2, b)
					}
					if _, err := Join(a, b); err == nil {
						t.Fatalf("Join across %s and %s succeeded", d1, d2)
					}
					if _, err := Meet(a, b); err == nil {
						t.Fatalf("Meet across %s and %s succeeded", d1, d2)
					}
				}
			})
		}
	}
}

func TestGTIDSetProperties(t *testing.T) {
	// Random sets built from random intervals: String is canonical, Contains
	// agrees with the intervals fed in, Upper covers Prefix.
	r := rand.New(rand.NewSource(42))
	for i := 0; i < 500; i++ {
		in := map[string]map[uint64]bool{}
		text := ""
		for _, id := range []string{u1, u2} {
			n := r.Intn(4)
			for k := 0; k < n; k++ {
				a := uint64(1 + r.Intn(20))
				b := a + uint64(r.Intn(4))
				if text != "" {
					text += ","
					if r.Intn(2) == 0 {
						text += "\n"
					}
				}
				text += fmt.Sprintf("%s:%d-%d", id, a, b)
				if in[id] == nil {
					in[id] = map[uint64]bool{}
				}
				for x := a; x <= b; x++ {
					in[id][x] = true
				}
			}
		}
		s, err := ParseGTIDSet(text)
		if err != nil {
			t.Fatalf("ParseGTIDSet(%q): %v", text, err)
		}
		checkGTIDSetCanonical(t, s)
		for _, id := range []string{u1, u2} {
			for x := uint64(0); x < 30; x++ {
				if s.Contains(id, x) != in[id][x] {
					t.Fatalf("%q: Contains(%s, %d) = %v", text, id, x, s.Contains(id, x))
				}
			}
		}
		back, err := ParseGTIDSet(s.String())
		if err != nil || back.String() != s.String() {
			t.Fatalf("%q: round trip %q, %v", text, back, err)
		}
		if !Covers(s.Upper(), s.Prefix()) {
			t.Fatalf("%q: Upper does not cover Prefix", text)
		}
		// The prefix gives the set back exactly when the set has no gaps.
		if pre := GTIDSetOf(s.Prefix()); pre.Equal(s) == gappy(s) {
			t.Fatalf("%q: GTIDSetOf(Prefix) = %q", text, pre)
		}
	}
}

// gappy reports whether some UUID's transactions are not 1-N.
func gappy(s GTIDSet) bool {
	for _, ivs := range s.m {
		if len(ivs) != 1 || ivs[0].Start != 1 {
			return true
		}
	}
	return false
}
