package frontier

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// seedVariants adds s, its torn prefixes (cut in the middle and one byte
// short) and s followed by garbage.
func seedVariants(f *testing.F, s string) {
	f.Add(s)
	if len(s) > 1 {
		f.Add(s[:len(s)/2])
		f.Add(s[:len(s)-1])
	}
	for _, g := range []string{"x", ",", ":", "-", "/", "\n", "\x00", "\xff", " 1"} {
		f.Add(s + g)
	}
}

func FuzzParseLSN(f *testing.F) {
	for _, s := range []string{"", "0/0", "0/16B3748", "16/b374d848", "FFFFFFFF/FFFFFFFF", "123456789/0", " 0/1", "/", "G/1"} {
		seedVariants(f, s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLSN(s)
		if err != nil {
			return
		}
		text := l.String()
		back, err := ParseLSN(text)
		if err != nil {
			t.Fatalf("ParseLSN(%q) = %v, but ParseLSN(String() = %q): %v", s, uint64(l), text, err)
		}
		if back != l {
			t.Fatalf("ParseLSN(%q) = %#x, round trip through %q gives %#x", s, uint64(l), text, uint64(back))
		}
		if back.String() != text {
			t.Fatalf("String not stable: %q then %q", text, back.String())
		}
		// The frontier form agrees.
		fr, err := Parse(DomainLSN, s)
		if err != nil || fr.Pos() != uint64(l) {
			t.Fatalf("Parse(lsn, %q) = %v, %v; ParseLSN gave %v", s, fr, err, l)
		}
	})
}

func FuzzParseGTIDSet(f *testing.F) {
	for _, s := range []string{
		"",
		u1 + ":1-5",
		u1 + ":1-5:7-9," + u2 + ":3",
		u1Upper + ":1-3:2-8,\n" + u2 + ":1-1",
		u1 + ":1-18446744073709551614",
		u1 + ":18446744073709551615",
		u1 + ":5-3",
		u1 + ":0",
		u1 + ":tag:1",
	} {
		seedVariants(f, s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseGTIDSet(s)
		if err != nil {
			return
		}
		checkGTIDSetCanonical(t, set)
		text := set.String()
		back, err := ParseGTIDSet(text)
		if err != nil {
			t.Fatalf("ParseGTIDSet(%q) ok, but its String %q does not parse: %v", s, text, err)
		}
		if !back.Equal(set) || !reflect.DeepEqual(back.m, set.m) {
			t.Fatalf("round trip of %q through %q: %q", s, text, back.String())
		}
		if back.String() != text {
			t.Fatalf("String not stable: %q then %q", text, back.String())
		}
		up, pre := set.Upper(), set.Prefix()
		checkInvariant(t, up)
		checkInvariant(t, pre)
		if !Covers(up, pre) {
			t.Fatalf("%q: Upper %v does not cover Prefix %v", s, up, pre)
		}
		for _, id := range set.UUIDs() {
			ivs := set.Intervals(id)
			last := ivs[len(ivs)-1].End
			if up.Get(id) != last+1 || !set.Contains(id, last) || set.Contains(id, last+1) {
				t.Fatalf("%q: Upper[%s] = %d, highest %d", s, id, up.Get(id), last)
			}
			if p := pre.Get(id); p == 0 || set.Contains(id, p) {
				t.Fatalf("%q: Prefix[%s] = %d", s, id, p)
			}
		}
		// The frontiers print and parse.
		for _, fr := range []Frontier{up, pre} {
			g, err := Parse(DomainMySQL, fr.String())
			if err != nil || !g.Equal(fr) {
				t.Fatalf("%q: frontier %q does not round trip: %v, %v", s, fr.String(), g.Map(), err)
			}
		}
	})
}

func FuzzParseMariaDBPos(f *testing.F) {
	for _, s := range []string{
		"",
		"0-1-42",
		"1-2-7,0-1-42",
		"0-1-42,\n1-2-7",
		"4294967295-4294967295-18446744073709551614",
		"0-1-18446744073709551615",
		"0-1-42,0-2-43",
		"00-01-042",
	} {
		seedVariants(f, s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pos, err := ParseMariaDBPos(s)
		if err != nil {
			return
		}
		for i := 1; i < len(pos); i++ {
			if pos[i-1].Domain >= pos[i].Domain {
				t.Fatalf("%q: position not sorted by domain or domain repeated: %v", s, pos)
			}
		}
		text := pos.String()
		back, err := ParseMariaDBPos(text)
		if err != nil {
			t.Fatalf("ParseMariaDBPos(%q) ok, but its String %q does not parse: %v", s, text, err)
		}
		if !reflect.DeepEqual(back, pos) {
			t.Fatalf("round trip of %q through %q: %v, want %v", s, text, back, pos)
		}
		if back.String() != text {
			t.Fatalf("String not stable: %q then %q", text, back.String())
		}
		up := pos.Upper()
		checkInvariant(t, up)
		if up.Len() != len(pos) {
			t.Fatalf("%q: Upper has %d partitions, position %d domains", s, up.Len(), len(pos))
		}
		for _, g := range pos {
			if up.Get(itoa(uint64(g.Domain))) != g.Seq+1 {
				t.Fatalf("%q: Upper[%d] = %d, want %d", s, g.Domain, up.Get(itoa(uint64(g.Domain))), g.Seq+1)
			}
		}
		g, err := Parse(DomainMariaDB, up.String())
		if err != nil || !g.Equal(up) {
			t.Fatalf("%q: frontier %q does not round trip: %v, %v", s, up.String(), g.Map(), err)
		}
	})
}

func FuzzParseFrontier(f *testing.F) {
	seeds := []string{
		"",
		"0/16B3748",
		"FFFFFFFF/FFFFFFFF",
		"1732900000000",
		"18446744073709551615",
		"0:15,1:7",
		"2:2,10:1",
		"0:0,1:7",
		"topic-a:3",
		"0:43,\n1:8",
		u1 + ":1-5," + u2 + "=1",
		u1Upper + ":1-3:4-5",
		u1 + ":1-5:7-9",
		u1 + "=2",
		"0:1,0:2",
	}
	for _, s := range seeds {
		seedVariants(f, s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, d := range Domains {
			fr, err := Parse(d, s)
			if err != nil {
				continue
			}
			if fr.Domain() != d {
				t.Fatalf("Parse(%s, %q) has domain %s", d, s, fr.Domain())
			}
			checkInvariant(t, fr)
			text := fr.String()
			back, err := Parse(d, text)
			if err != nil {
				t.Fatalf("Parse(%s, %q) = %v ok, but its String %q does not parse: %v", d, s, fr.Map(), text, err)
			}
			if !back.Equal(fr) {
				t.Fatalf("Parse(%s, %q) = %v, round trip through %q gives %v", d, s, fr.Map(), text, back.Map())
			}
			if back.String() != text {
				t.Fatalf("String not stable: %q then %q", text, back.String())
			}
			// Every parsed frontier also survives JSON.
			b, err := json.Marshal(fr)
			if err != nil {
				t.Fatal(err)
			}
			var j Frontier
			if err := json.Unmarshal(b, &j); err != nil || !j.Equal(fr) {
				t.Fatalf("%s %q: JSON %s gives %v, %v", d, s, b, j.Map(), err)
			}
		}
	})
}

func FuzzFrontierJSON(f *testing.F) {
	seeds := []string{
		`{"domain":"kafka","text":"0:15,1:7","upper":{"0":15,"1":7}}`,
		`{"domain":"lsn","text":"0/16B3748","upper":{"":23803720}}`,
		`{"domain":"system_ms","text":"0","upper":{}}`,
		`{"domain":"mariadb","text":"0:43","upper":{"0":43}}`,
		`{"domain":"mysql","text":"","upper":{"` + u1 + `":6}}`,
		`{"domain":"kafka","upper":{"0":0}}`,
		`{"domain":"kafka","upper":{"":1}}`,
		`{"domain":"nope","upper":{}}`,
		`{"domain":"kafka","upper":{"a\u00a0":1}}`,
		`{"domain":"kafka","upper":{"\ud800":1}}`,
		`null`,
		``,
	}
	for _, s := range seeds {
		seedVariants(f, s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var fr Frontier
		if err := json.Unmarshal([]byte(s), &fr); err != nil {
			return
		}
		if fr.Domain() == "" {
			// Only a null leaves the zero Frontier.
			if !fr.IsEmpty() {
				t.Fatalf("%q: frontier without a domain has partitions %v", s, fr.Map())
			}
			return
		}
		checkInvariant(t, fr)
		b, err := json.Marshal(fr)
		if err != nil {
			t.Fatalf("Marshal after Unmarshal(%q): %v", s, err)
		}
		var back Frontier
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%q) ok, but its Marshal %s does not decode: %v", s, b, err)
		}
		if !back.Equal(fr) {
			t.Fatalf("%q: round trip through %s gives %v, want %v", s, b, back.Map(), fr.Map())
		}
		b2, err := json.Marshal(back)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("Marshal not stable: %s then %s (%v)", b, b2, err)
		}
		// The text field is the String form and parses back.
		var j jsonFrontier
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		if j.Text != fr.String() || j.Domain != fr.Domain() {
			t.Fatalf("%s: text %q, String %q", b, j.Text, fr.String())
		}
		g, err := Parse(fr.Domain(), j.Text)
		if err != nil || !g.Equal(fr) {
			t.Fatalf("%s: text does not parse back: %v, %v", b, g.Map(), err)
		}
	})
}
