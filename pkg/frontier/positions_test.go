package frontier

import (
	"reflect"
	"strings"
	"testing"
)

// Two server UUIDs, u1 < u2 lexically.
const (
	u1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	u2 = "9b2c6a8e-0000-11ee-8000-000000000002"
)

var u1Upper = strings.ToUpper(u1)

func TestParseLSN(t *testing.T) {
	good := []struct {
		name, in, str string
		want          LSN
	}{
		{"zero", "0/0", "0/0", 0},
		{"max", "FFFFFFFF/FFFFFFFF", "FFFFFFFF/FFFFFFFF", LSN(^uint64(0))},
		{"typical", "0/16B3748", "0/16B3748", 0x16B3748},
		{"high half", "16/B374D848", "16/B374D848", 0x16_B374D848},
		{"lowercase", "ab/cdef", "AB/CDEF", 0xAB_0000CDEF},
		{"mixed case", "aB/Cd", "AB/CD", 0xAB_000000CD},
		{"leading zeros", "00000001/00000000", "1/0", 1 << 32},
		{"measured write", "0/3920EAC8", "0/3920EAC8", 0x3920EAC8},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseLSN(c.in)
			if err != nil {
				t.Fatalf("ParseLSN(%q): %v", c.in, err)
			}
			if got != c.want {
				t.Fatalf("ParseLSN(%q) = %#x, want %#x", c.in, uint64(got), uint64(c.want))
			}
			if s := got.String(); s != c.str {
				t.Fatalf("String() = %q, want %q", s, c.str)
			}
			back, err := ParseLSN(got.String())
			if err != nil || back != got {
				t.Fatalf("ParseLSN(String()) = %v, %v; want %v", back, err, got)
			}
		})
	}
	bad := []struct{ name, in string }{
		{"empty", ""},
		{"no slash", "0"},
		{"no high half", "/1"},
		{"no low half", "1/"},
		{"not hex", "G/1"},
		{"high half too long", "123456789/0"},
		{"low half too long", "0/123456789"},
		{"leading space", " 0/1"},
		{"trailing space", "0/1 "},
		{"trailing newline", "0/1\n"},
		{"two slashes", "1/2/3"},
		{"minus", "-1/0"},
		{"plus", "+1/0"},
		{"0x prefix", "0x1/0"},
		{"underscore", "1_0/0"},
		{"just slash", "/"},
		{"decimal point", "1.0/0"},
	}
	for _, c := range bad {
		t.Run("bad/"+c.name, func(t *testing.T) {
			if got, err := ParseLSN(c.in); err == nil {
				t.Fatalf("ParseLSN(%q) = %v, want an error", c.in, got)
			}
		})
	}
}

func TestLSNOrderMatchesNumericOrder(t *testing.T) {
	// 0/FFFFFFFF < 1/0: the high half is the more significant one.
	a, _ := ParseLSN("0/FFFFFFFF")
	b, _ := ParseLSN("1/0")
	if !(a < b) || b-a != 1 {
		t.Fatalf("0/FFFFFFFF = %#x, 1/0 = %#x: want consecutive", uint64(a), uint64(b))
	}
}

func TestParseGTIDSet(t *testing.T) {
	good := []struct{ name, in, want string }{
		{"empty", "", ""},
		{"only white space", " \n\t ", ""},
		{"one range", u1 + ":1-5", u1 + ":1-5"},
		{"single number", u1 + ":7", u1 + ":7"},
		{"degenerate range prints as number", u1 + ":5-5", u1 + ":5"},
		{"two ranges with gap", u1 + ":1-5:7-9", u1 + ":1-5:7-9"},
		{"overlapping merged", u1 + ":1-5:3-8", u1 + ":1-8"},
		{"adjacent merged", u1 + ":1-5:6-9", u1 + ":1-9"},
		{"contained merged", u1 + ":1-10:3-4", u1 + ":1-10"},
		{"unsorted sorted", u1 + ":7-9:1-3", u1 + ":1-3:7-9"},
		{"single numbers merged", u1 + ":1:2:3:5", u1 + ":1-3:5"},
		{"duplicate numbers", u1 + ":4:4:4", u1 + ":4"},
		{"several uuids sorted", u2 + ":1-3," + u1 + ":1-5", u1 + ":1-5," + u2 + ":1-3"},
		{"uppercase uuid normalised", u1Upper + ":1-5", u1 + ":1-5"},
		{"same uuid in two items merged", u1 + ":1-3," + u1 + ":4-6", u1 + ":1-6"},
		{"same uuid different case merged", u1Upper + ":1-3," + u1 + ":5", u1 + ":1-3:5"},
		{"mysql multi-line output", u1 + ":1-5,\n" + u2 + ":1-3", u1 + ":1-5," + u2 + ":1-3"},
		{"crlf and indentation", "\n" + u1 + ":1-5,\r\n  " + u2 + ":1-3\n", u1 + ":1-5," + u2 + ":1-3"},
		{"largest end", u1 + ":1-18446744073709551614", u1 + ":1-18446744073709551614"},
		{"leading zeros", u1 + ":01-007", u1 + ":1-7"},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseGTIDSet(c.in)
			if err != nil {
				t.Fatalf("ParseGTIDSet(%q): %v", c.in, err)
			}
			if got := s.String(); got != c.want {
				t.Fatalf("String() = %q, want %q", got, c.want)
			}
			back, err := ParseGTIDSet(s.String())
			if err != nil || !back.Equal(s) || back.String() != s.String() {
				t.Fatalf("round trip: %q, %v", back.String(), err)
			}
			checkGTIDSetCanonical(t, s)
		})
	}
	bad := []struct{ name, in string }{
		{"zero", u1 + ":0"},
		{"zero start", u1 + ":0-5"},
		{"reversed range", u1 + ":5-3"},
		{"missing intervals", u1},
		{"empty interval", u1 + ":"},
		{"empty interval in the middle", u1 + "::1"},
		{"trailing colon", u1 + ":1:"},
		{"open end", u1 + ":1-"},
		{"open start", u1 + ":-5"},
		{"double range", u1 + ":1-2-3"},
		{"not a number", u1 + ":a"},
		{"plus sign", u1 + ":+1"},
		{"space in interval", u1 + ": 1-5"},
		{"space before colon", u1 + " :1-5"},
		{"trailing comma", u1 + ":1-5,"},
		{"leading comma", "," + u1 + ":1-5"},
		{"empty item", u1 + ":1-5,," + u2 + ":1"},
		{"short uuid", u1[:35] + ":1"},
		{"long uuid", u1 + "0:1"},
		{"uuid without dashes", strings.ReplaceAll(u1, "-", "") + "0000:1"},
		{"uuid dash misplaced", "3e11fa4-771ca-11e1-9e33-c80aa9429562:1"},
		{"uuid not hex", "3e11fa47-71ca-11e1-9e33-c80aa942956g:1"},
		{"uuid braces", "{" + u1[1:35] + "}:1"},
		{"start 2^64-1", u1 + ":18446744073709551615"},
		{"end 2^64-1", u1 + ":1-18446744073709551615"},
		{"overflow", u1 + ":18446744073709551616"},
		{"tagged gtid", u1 + ":tag:1-5"},
		{"mariadb position", "0-1-42"},
	}
	for _, c := range bad {
		t.Run("bad/"+c.name, func(t *testing.T) {
			if s, err := ParseGTIDSet(c.in); err == nil {
				t.Fatalf("ParseGTIDSet(%q) = %q, want an error", c.in, s.String())
			}
		})
	}
}

// checkGTIDSetCanonical checks the representation invariant: lowercase
// UUIDs, intervals sorted, disjoint, non-adjacent, 1 <= Start <= End < 2^64-1.
func checkGTIDSetCanonical(t *testing.T, s GTIDSet) {
	t.Helper()
	for id, ivs := range s.m {
		if strings.ToLower(id) != id {
			t.Errorf("uuid %q not lowercase", id)
		}
		if len(ivs) == 0 {
			t.Errorf("uuid %s has no intervals", id)
		}
		for i, iv := range ivs {
			if iv.Start == 0 || iv.Start > iv.End || iv.End == ^uint64(0) {
				t.Errorf("uuid %s interval %d = %v is invalid", id, i, iv)
			}
			if i > 0 && iv.Start <= ivs[i-1].End+1 {
				t.Errorf("uuid %s intervals %v and %v overlap or touch", id, ivs[i-1], iv)
			}
		}
	}
}

func TestGTIDSetAccessors(t *testing.T) {
	s, err := ParseGTIDSet(u2 + ":3," + u1 + ":1-5:7-9")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.UUIDs(), []string{u1, u2}; !reflect.DeepEqual(got, want) {
		t.Errorf("UUIDs() = %v, want %v", got, want)
	}
	want := []Interval{{1, 5}, {7, 9}}
	for _, id := range []string{u1, u1Upper} {
		if got := s.Intervals(id); !reflect.DeepEqual(got, want) {
			t.Errorf("Intervals(%s) = %v, want %v", id, got, want)
		}
	}
	if got := s.Intervals("ffffffff-ffff-ffff-ffff-ffffffffffff"); got != nil {
		t.Errorf("Intervals(absent) = %v, want nil", got)
	}
	// Intervals returns a copy.
	ivs := s.Intervals(u1)
	ivs[0].End = 100
	if got := s.Intervals(u1); !reflect.DeepEqual(got, want) {
		t.Errorf("mutating Intervals() result changed the set: %v", got)
	}
	var zero GTIDSet
	if zero.String() != "" || len(zero.UUIDs()) != 0 || zero.Contains(u1, 1) || !zero.Upper().IsEmpty() {
		t.Errorf("zero GTIDSet is not the empty set")
	}
}

func TestGTIDSetContains(t *testing.T) {
	s, err := ParseGTIDSet(u1 + ":1-5:7-9," + u2 + ":4")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		uuid string
		n    uint64
		want bool
	}{
		{"zero", u1, 0, false},
		{"first", u1, 1, true},
		{"end of first range", u1, 5, true},
		{"gap", u1, 6, false},
		{"start of second range", u1, 7, true},
		{"end of second range", u1, 9, true},
		{"past the end", u1, 10, false},
		{"uppercase query", u1Upper, 8, true},
		{"single number", u2, 4, true},
		{"below single number", u2, 3, false},
		{"above single number", u2, 5, false},
		{"absent uuid", "00000000-0000-0000-0000-000000000000", 1, false},
		{"max", u1, ^uint64(0), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := s.Contains(c.uuid, c.n); got != c.want {
				t.Fatalf("Contains(%s, %d) = %v, want %v", c.uuid, c.n, got, c.want)
			}
		})
	}
}

func TestGTIDSetEqual(t *testing.T) {
	a, _ := ParseGTIDSet(u1 + ":1-3:4-5")
	b, _ := ParseGTIDSet(u1Upper + ":1-5")
	c, _ := ParseGTIDSet(u1 + ":1-4")
	d, _ := ParseGTIDSet(u2 + ":1-5")
	if !a.Equal(b) || !b.Equal(a) {
		t.Errorf("%q and %q should be equal", a, b)
	}
	if a.Equal(c) || a.Equal(d) {
		t.Errorf("%q equal to %q or %q", a, c, d)
	}
	var zero GTIDSet
	e, _ := ParseGTIDSet("")
	if !zero.Equal(e) {
		t.Errorf("zero set not equal to parsed empty set")
	}
}

func TestGTIDSetUpperPrefix(t *testing.T) {
	cases := []struct {
		name          string
		in            string
		upper, prefix map[string]uint64
	}{
		{"empty", "", nil, nil},
		{"contiguous", u1 + ":1-5", map[string]uint64{u1: 6}, map[string]uint64{u1: 6}},
		{"single first", u1 + ":1", map[string]uint64{u1: 2}, map[string]uint64{u1: 2}},
		{"gap: upper is highest+1, prefix stops at the gap", u1 + ":1-5:7-9", map[string]uint64{u1: 10}, map[string]uint64{u1: 6}},
		{"several gaps", u1 + ":1-2:4:6-7:100", map[string]uint64{u1: 101}, map[string]uint64{u1: 3}},
		{"missing transaction 1", u1 + ":3-5", map[string]uint64{u1: 6}, map[string]uint64{u1: 1}},
		{"two servers", u1 + ":1-5," + u2 + ":2-3", map[string]uint64{u1: 6, u2: 4}, map[string]uint64{u1: 6, u2: 1}},
		{"largest", u1 + ":1-18446744073709551614", map[string]uint64{u1: ^uint64(0)}, map[string]uint64{u1: ^uint64(0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseGTIDSet(c.in)
			if err != nil {
				t.Fatal(err)
			}
			up, pre := s.Upper(), s.Prefix()
			wantUp := mustNew(t, DomainMySQL, c.upper)
			wantPre := mustNew(t, DomainMySQL, c.prefix)
			if !up.Equal(wantUp) {
				t.Errorf("Upper() = %v, want %v", up.Map(), c.upper)
			}
			if !pre.Equal(wantPre) {
				t.Errorf("Prefix() = %v, want %v", pre.Map(), c.prefix)
			}
			checkInvariant(t, up)
			checkInvariant(t, pre)
			if !up.Covers(pre) {
				t.Errorf("Upper() %v does not cover Prefix() %v", up, pre)
			}
			// Every transaction below the prefix is in the set; the
			// prefix itself is not.
			for id, next := range pre.Map() {
				if s.Contains(id, next) {
					t.Errorf("Prefix()[%s] = %d is in the set", id, next)
				}
				if next > 1 && !s.Contains(id, next-1) {
					t.Errorf("Prefix()[%s] = %d but %d is not in the set", id, next, next-1)
				}
			}
			// Nothing at or past the upper is in the set; the upper-1 is.
			for id, next := range up.Map() {
				if next != ^uint64(0) && s.Contains(id, next) {
					t.Errorf("Upper()[%s] = %d is in the set", id, next)
				}
				if !s.Contains(id, next-1) {
					t.Errorf("Upper()[%s] = %d but %d is not in the set", id, next, next-1)
				}
			}
		})
	}
}

func TestGTIDSetOf(t *testing.T) {
	cases := []struct {
		name  string
		parts map[string]uint64
		want  string
	}{
		{"empty", nil, ""},
		{"one", map[string]uint64{u1: 6}, u1 + ":1-5"},
		{"next 2 is transaction 1", map[string]uint64{u1: 2}, u1 + ":1"},
		{"next 1 is nothing", map[string]uint64{u1: 1, u2: 4}, u2 + ":1-3"},
		{"two", map[string]uint64{u2: 3, u1: 10}, u1 + ":1-9," + u2 + ":1-2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := mustNew(t, DomainMySQL, c.parts)
			s := GTIDSetOf(f)
			if got := s.String(); got != c.want {
				t.Fatalf("GTIDSetOf(%v) = %q, want %q", c.parts, got, c.want)
			}
			checkGTIDSetCanonical(t, s)
			// Round trip through Upper and Prefix, except for partitions
			// at 1 which the set cannot express.
			want := f
			for p, v := range f.Map() {
				if v == 1 {
					want = want.With(p, 0)
				}
			}
			if !s.Upper().Equal(want) || !s.Prefix().Equal(want) {
				t.Fatalf("Upper() = %v, Prefix() = %v; want %v", s.Upper().Map(), s.Prefix().Map(), want.Map())
			}
		})
	}
}

func TestParseMariaDBPos(t *testing.T) {
	good := []struct {
		name, in string
		want     MariaDBPos
		str      string
	}{
		{"empty", "", MariaDBPos{}, ""},
		{"white space", " \n", MariaDBPos{}, ""},
		{"one", "0-1-42", MariaDBPos{{0, 1, 42}}, "0-1-42"},
		{"sorted by domain", "1-2-7,0-1-42", MariaDBPos{{0, 1, 42}, {1, 2, 7}}, "0-1-42,1-2-7"},
		{"numeric not lexical order", "10-1-1,2-1-1,1-1-1", MariaDBPos{{1, 1, 1}, {2, 1, 1}, {10, 1, 1}}, "1-1-1,2-1-1,10-1-1"},
		{"spaces and newlines", " 0-1-42,\n 1-2-7 ", MariaDBPos{{0, 1, 42}, {1, 2, 7}}, "0-1-42,1-2-7"},
		{"seq 0", "0-1-0", MariaDBPos{{0, 1, 0}}, "0-1-0"},
		{"leading zeros", "00-01-042", MariaDBPos{{0, 1, 42}}, "0-1-42"},
		{"maxima", "4294967295-4294967295-18446744073709551614", MariaDBPos{{1<<32 - 1, 1<<32 - 1, 1<<64 - 2}}, "4294967295-4294967295-18446744073709551614"},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			p, err := ParseMariaDBPos(c.in)
			if err != nil {
				t.Fatalf("ParseMariaDBPos(%q): %v", c.in, err)
			}
			if !reflect.DeepEqual(p, c.want) {
				t.Fatalf("ParseMariaDBPos(%q) = %v, want %v", c.in, p, c.want)
			}
			if got := p.String(); got != c.str {
				t.Fatalf("String() = %q, want %q", got, c.str)
			}
			back, err := ParseMariaDBPos(p.String())
			if err != nil || !reflect.DeepEqual(back, p) {
				t.Fatalf("round trip: %v, %v", back, err)
			}
		})
	}
	bad := []struct{ name, in string }{
		{"duplicate domain", "0-1-42,0-2-43"},
		{"duplicate domain after sorting", "1-1-1,0-1-1,1-1-1"},
		{"two fields", "0-1"},
		{"four fields", "0-1-2-3"},
		{"not a number", "a-1-2"},
		{"empty seq", "0-1-"},
		{"empty domain", "-1-2"},
		{"domain too big", "4294967296-1-1"},
		{"server too big", "0-4294967296-1"},
		{"seq 2^64-1", "0-1-18446744073709551615"},
		{"seq overflow", "0-1-18446744073709551616"},
		{"trailing comma", "0-1-42,"},
		{"empty item", "0-1-42,,1-1-1"},
		{"plus sign", "0-1-+4"},
		{"colons", "0:1:2"},
		{"space inside", "0 -1-2"},
		{"mysql gtid", u1 + ":1-5"},
	}
	for _, c := range bad {
		t.Run("bad/"+c.name, func(t *testing.T) {
			if p, err := ParseMariaDBPos(c.in); err == nil {
				t.Fatalf("ParseMariaDBPos(%q) = %v, want an error", c.in, p)
			}
		})
	}
}

func TestMariaDBPosUpper(t *testing.T) {
	cases := []struct {
		name, in string
		want     map[string]uint64
	}{
		{"empty", "", nil},
		{"one", "0-1-42", map[string]uint64{"0": 43}},
		{"two", "1-2-7,0-1-42", map[string]uint64{"0": 43, "1": 8}},
		{"seq 0 gives 1", "5-1-0", map[string]uint64{"5": 1}},
		{"server id does not matter", "3-99-10", map[string]uint64{"3": 11}},
		{"largest", "4294967295-1-18446744073709551614", map[string]uint64{"4294967295": ^uint64(0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := ParseMariaDBPos(c.in)
			if err != nil {
				t.Fatal(err)
			}
			got := p.Upper()
			if want := mustNew(t, DomainMariaDB, c.want); !got.Equal(want) {
				t.Fatalf("Upper() = %v (%s), want %v", got.Map(), got.Domain(), c.want)
			}
			checkInvariant(t, got)
			// An update at seq is complete under the upper.
			for _, g := range p {
				if !got.Beyond(Time{Partition: itoa(uint64(g.Domain)), Pos: g.Seq}) {
					t.Errorf("Upper() not beyond %v", g)
				}
			}
		})
	}
	if got := (MariaDBGTID{1, 2, 3}).String(); got != "1-2-3" {
		t.Errorf("MariaDBGTID.String() = %q", got)
	}
}

func TestKafkaOffsets(t *testing.T) {
	cases := []struct {
		name string
		in   map[int32]int64
		want map[string]uint64
		str  string
	}{
		{"nil", nil, nil, ""},
		{"empty", map[int32]int64{}, nil, ""},
		{"two", map[int32]int64{0: 15, 1: 7}, map[string]uint64{"0": 15, "1": 7}, "0:15,1:7"},
		{"zero dropped", map[int32]int64{0: 0, 1: 3}, map[string]uint64{"1": 3}, "1:3"},
		{"negative dropped", map[int32]int64{0: -1, 1: -2, 2: 5}, map[string]uint64{"2": 5}, "2:5"},
		{"natural order", map[int32]int64{10: 1, 2: 2, 1: 3}, map[string]uint64{"1": 3, "2": 2, "10": 1}, "1:3,2:2,10:1"},
		{"largest", map[int32]int64{2147483647: 9223372036854775807}, map[string]uint64{"2147483647": 1<<63 - 1}, "2147483647:9223372036854775807"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := KafkaOffsets(c.in)
			if got.Domain() != DomainKafka {
				t.Fatalf("domain %q", got.Domain())
			}
			if want := mustNew(t, DomainKafka, c.want); !got.Equal(want) {
				t.Fatalf("KafkaOffsets(%v) = %v, want %v", c.in, got.Map(), c.want)
			}
			if s := got.String(); s != c.str {
				t.Fatalf("String() = %q, want %q", s, c.str)
			}
			checkInvariant(t, got)
		})
	}
}
