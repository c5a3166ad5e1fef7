package pgarrow

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func usOf(t time.Time) int64 { return t.UnixMicro() }

func TestParseDate(t *testing.T) {
	days := func(y int, m time.Month, d int) int32 {
		return int32(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
	}
	for _, tc := range []struct {
		in   string
		want int32
		err  bool
	}{
		{"1970-01-01", 0, false},
		{"2000-02-29", days(2000, 2, 29), false},
		{"1969-12-31", -1, false},
		{"0001-01-01", days(1, 1, 1), false},
		{"0001-12-31 BC", days(0, 12, 31), false},
		{"4714-11-24 BC", days(-4713, 11, 24), false},
		{"5874897-12-31", int32(daysFromCivil(5874897, 12, 31)), false},
		{"infinity", DateInfinity, false},
		{"-infinity", DateNegInfinity, false},
		{"2024-13-01", 0, true},
		{"2024-02-30", 0, true},
		{"0000-01-01", 0, true},
		{"24-01-01", 0, true},
		{"2024-01-01x", 0, true},
		{"", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDate([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("ParseDate(%q) error = %v, want error %v", tc.in, err, tc.err)
			}
			if !tc.err && got != tc.want {
				t.Errorf("ParseDate(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseTimestamp(t *testing.T) {
	for _, tc := range []struct {
		in   string
		tz   bool
		want int64
		err  bool
	}{
		{"1970-01-01 00:00:00", false, 0, false},
		{"2024-03-05 06:07:08.123456", false, usOf(time.Date(2024, 3, 5, 6, 7, 8, 123456000, time.UTC)), false},
		{"2024-03-05 06:07:08.5", false, usOf(time.Date(2024, 3, 5, 6, 7, 8, 500000000, time.UTC)), false},
		{"0044-03-15 12:00:00 BC", false, usOf(time.Date(-43, 3, 15, 12, 0, 0, 0, time.UTC)), false},
		{"infinity", false, TimestampInfinity, false},
		{"-infinity", true, TimestampNegInfinity, false},
		{"2024-03-05 06:07:08+00", true, usOf(time.Date(2024, 3, 5, 6, 7, 8, 0, time.UTC)), false},
		{"2024-03-05 06:07:08.25+05:30", true, usOf(time.Date(2024, 3, 5, 0, 37, 8, 250000000, time.UTC)), false},
		{"2024-03-05 06:07:08-03", true, usOf(time.Date(2024, 3, 5, 9, 7, 8, 0, time.UTC)), false},
		{"1900-01-01 00:00:00+00:09:21", true, usOf(time.Date(1899, 12, 31, 23, 50, 39, 0, time.UTC)), false},
		{"2024-03-05 06:07:08", true, 0, true},      // timestamptz needs an offset
		{"2024-03-05 06:07:08+00", false, 0, true},  // timestamp has none
		{"2024-03-05 24:00:00", false, 0, true},     // PostgreSQL normalizes this away
		{"2024-03-05 06:07", false, 0, true},        // seconds are always printed... but see below
		{"2024-03-05T06:07:08", false, 1, false},    // ISO 'T' accepted
		{"2024-03-05 06:07:08.", false, 0, true},    // dot without digits
		{"2024-03-05 06:07:08 BCE", false, 0, true}, // junk
	} {
		t.Run(tc.in, func(t *testing.T) {
			var got int64
			var err error
			if tc.tz {
				got, err = ParseTimestamptz([]byte(tc.in))
			} else {
				got, err = ParseTimestamp([]byte(tc.in))
			}
			if tc.in == "2024-03-05 06:07" {
				// parseClock accepts HH:MM without seconds; so does PostgreSQL's input.
				if err != nil || got != usOf(time.Date(2024, 3, 5, 6, 7, 0, 0, time.UTC)) {
					t.Fatalf("got %d, %v", got, err)
				}
				return
			}
			if tc.in == "2024-03-05T06:07:08" {
				tc.want = usOf(time.Date(2024, 3, 5, 6, 7, 8, 0, time.UTC))
			}
			if (err != nil) != tc.err {
				t.Fatalf("parse(%q) error = %v, want error %v", tc.in, err, tc.err)
			}
			if !tc.err && got != tc.want {
				t.Errorf("parse(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"00:00:00", 0, false},
		{"23:59:59.999999", 86399999999, false},
		{"24:00:00", 86400000000, false},
		{"12:34:56.7", (12*3600+34*60+56)*1e6 + 700000, false},
		{"24:00:01", 0, true},
		{"12:60:00", 0, true},
		{"12:00:00+01", 0, true},
	} {
		got, err := ParseTime([]byte(tc.in))
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseTime(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseInterval(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want arrow.MonthDayNanoInterval
		err  bool
	}{
		{"00:00:00", arrow.MonthDayNanoInterval{}, false},
		{"1 year 2 mons 3 days 04:05:06.789", arrow.MonthDayNanoInterval{Months: 14, Days: 3, Nanoseconds: (4*3600+5*60+6)*1e9 + 789e6}, false},
		{"-1 years -2 mons +3 days -04:05:06", arrow.MonthDayNanoInterval{Months: -14, Days: 3, Nanoseconds: -(4*3600 + 5*60 + 6) * 1e9}, false},
		{"1 mon", arrow.MonthDayNanoInterval{Months: 1}, false},
		{"-1 days", arrow.MonthDayNanoInterval{Days: -1}, false},
		{"1 day -00:00:00.000001", arrow.MonthDayNanoInterval{Days: 1, Nanoseconds: -1000}, false},
		{"178000000 years", arrow.MonthDayNanoInterval{Months: 178000000 * 12}, false},
		{"2562047:47:16.854775", arrow.MonthDayNanoInterval{Nanoseconds: 9223372036854775000}, false},
		{"2562047788:00:54.775807", arrow.MonthDayNanoInterval{}, true}, // PostgreSQL's maximum: beyond int64 nanoseconds
		{"P1Y", arrow.MonthDayNanoInterval{}, true},
		{"@ 1 hour", arrow.MonthDayNanoInterval{}, true},
		{"1 fortnight", arrow.MonthDayNanoInterval{}, true},
		{"", arrow.MonthDayNanoInterval{}, true},
	} {
		got, err := ParseInterval([]byte(tc.in))
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseInterval(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseDecimal(t *testing.T) {
	for _, tc := range []struct {
		in       string
		p, s     int32
		want     string // ToString(s)
		err      bool
		errMatch string
	}{
		{"0.00", 10, 2, "0.00", false, ""},
		{"-12.34", 10, 2, "-12.34", false, ""},
		{"12.3", 10, 2, "12.30", false, ""},
		{"99999999.99", 10, 2, "99999999.99", false, ""},
		{"123", 5, 0, "123", false, ""},
		{"12345678901234567890123456789012345678", 38, 0, "12345678901234567890123456789012345678", false, ""},
		{"0.12345678901234567890123456789012345678", 38, 38, "0.12345678901234567890123456789012345678", false, ""},
		{"123456", 5, 0, "", true, "does not fit"},
		{"1.234", 10, 2, "", true, "fractional digits"},
		{"NaN", 10, 2, "", true, "not representable"},
		{"", 10, 2, "", true, "invalid syntax"},
		{"1e5", 10, 2, "", true, "invalid syntax"},
		{".", 10, 2, "", true, "invalid syntax"},
	} {
		got, err := ParseDecimal([]byte(tc.in), tc.p, tc.s)
		if (err != nil) != tc.err {
			t.Errorf("ParseDecimal(%q, %d, %d) error = %v, want error %v", tc.in, tc.p, tc.s, err, tc.err)
			continue
		}
		if tc.err {
			if !strings.Contains(err.Error(), tc.errMatch) {
				t.Errorf("ParseDecimal(%q) error %q does not mention %q", tc.in, err, tc.errMatch)
			}
			continue
		}
		if s := got.ToString(tc.s); s != tc.want {
			t.Errorf("ParseDecimal(%q, %d, %d) = %s, want %s", tc.in, tc.p, tc.s, s, tc.want)
		}
	}
}

func TestNumericTypmod(t *testing.T) {
	for _, tc := range []struct {
		mod  int32
		p, s int32
		ok   bool
	}{
		{-1, 0, 0, false},
		{(10<<16 | 2) + 4, 10, 2, true},
		{(38<<16 | 0) + 4, 38, 0, true},
		{(39<<16 | 0) + 4, 0, 0, false},
		{(5<<16 | 0xfffe) + 4, 0, 0, false}, // numeric(5,-2)
		{(3<<16 | 5) + 4, 0, 0, false},      // numeric(3,5): scale > precision
	} {
		p, s, ok := numericTypmod(tc.mod)
		if ok != tc.ok || (ok && (p != tc.p || s != tc.s)) {
			t.Errorf("numericTypmod(%d) = %d, %d, %v; want %d, %d, %v", tc.mod, p, s, ok, tc.p, tc.s, tc.ok)
		}
	}
}

func TestParseScalars(t *testing.T) {
	if v, err := ParseBool([]byte("t")); err != nil || !v {
		t.Errorf("ParseBool(t) = %v, %v", v, err)
	}
	if v, err := ParseBool([]byte("f")); err != nil || v {
		t.Errorf("ParseBool(f) = %v, %v", v, err)
	}
	if _, err := ParseBool([]byte("maybe")); err == nil {
		t.Error("ParseBool(maybe) did not fail")
	}
	if v, err := ParseInt([]byte("-32768"), 16); err != nil || v != -32768 {
		t.Errorf("ParseInt(-32768, 16) = %d, %v", v, err)
	}
	if _, err := ParseInt([]byte("32768"), 16); err == nil {
		t.Error("ParseInt(32768, 16) did not fail")
	}
	if v, err := ParseUint32([]byte("4294967295")); err != nil || v != math.MaxUint32 {
		t.Errorf("ParseUint32 = %d, %v", v, err)
	}
	for in, want := range map[string]float64{"NaN": math.NaN(), "Infinity": math.Inf(1), "-Infinity": math.Inf(-1), "1.5e-07": 1.5e-07, "-0": math.Copysign(0, -1)} {
		got, err := ParseFloat([]byte(in), 64)
		if err != nil || !(got == want || math.IsNaN(got) && math.IsNaN(want)) || math.Signbit(got) != math.Signbit(want) {
			t.Errorf("ParseFloat(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if v, err := ParseFloat([]byte("3.4028235e+38"), 32); err != nil || float32(v) != math.MaxFloat32 {
		t.Errorf("ParseFloat(max float4) = %v, %v", v, err)
	}
	for in, want := range map[string][]byte{`\x`: {}, `\x00ff10`: {0, 0xff, 0x10}, `\xDEADbeef`: {0xde, 0xad, 0xbe, 0xef}, `abc\\\000\377`: []byte("abc\\\x00\xff")} {
		got, err := ParseBytea([]byte(in))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("ParseBytea(%q) = %x, %v; want %x", in, got, err, want)
		}
	}
	for _, in := range []string{`\x0`, `\xzz`, `a\b`, `\400`} {
		if _, err := ParseBytea([]byte(in)); err == nil {
			t.Errorf("ParseBytea(%q) did not fail", in)
		}
	}
}

type arrayCase struct {
	in    string
	want  []string // "<NULL>" for a null
	ndims int
	err   bool
}

func TestParseArray(t *testing.T) {
	for _, tc := range []arrayCase{
		{`{}`, nil, 0, false},
		{`{1,2,3}`, []string{"1", "2", "3"}, 1, false},
		{`{1,NULL,null,"NULL"}`, []string{"1", "<NULL>", "<NULL>", "NULL"}, 1, false},
		{`{"a b","c\"d","e\\f",""}`, []string{"a b", `c"d`, `e\f`, ""}, 1, false},
		{`{ a , b }`, []string{"a", "b"}, 1, false},
		{`{a\ ,b}`, []string{"a ", "b"}, 1, false},
		{`{\NULL}`, []string{"NULL"}, 1, false},
		{`{"{x}","a,b"}`, []string{"{x}", "a,b"}, 1, false},
		{`{{1,2},{3,4}}`, []string{"1", "2", "3", "4"}, 2, false},
		{`{{{1},{2}},{{3},{4}}}`, []string{"1", "2", "3", "4"}, 3, false},
		{`[0:2]={a,b,c}`, []string{"a", "b", "c"}, 1, false},
		{`[1:2][1:1]={{a},{b}}`, []string{"a", "b"}, 2, false},
		{`{"2024-01-01 00:00:00+00","2024-01-02 00:00:00+00"}`, []string{"2024-01-01 00:00:00+00", "2024-01-02 00:00:00+00"}, 1, false},
		{`{{1,2},{3}}`, nil, 0, true},
		{`{{1,2},3}`, nil, 0, true},
		{`{1,{2}}`, nil, 0, true},
		{`{1,2`, nil, 0, true},
		{`{"abc}`, nil, 0, true},
		{`{1,,2}`, nil, 0, true},
		{`{1}x`, nil, 0, true},
		{`1,2`, nil, 0, true},
		{``, nil, 0, true},
		{`{a"b}`, nil, 0, true},
		{`{{}}`, nil, 0, true},
		{`[1:2={a}`, nil, 0, true},
		{`[1:2][1:2]={a,b}`, nil, 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, nd, err := ParseArray([]byte(tc.in), ',')
			if (err != nil) != tc.err {
				t.Fatalf("ParseArray(%q) error = %v, want error %v", tc.in, err, tc.err)
			}
			if tc.err {
				return
			}
			if nd != tc.ndims {
				t.Errorf("ndims = %d, want %d", nd, tc.ndims)
			}
			var strs []string
			for _, e := range got {
				if e.Null {
					strs = append(strs, "<NULL>")
				} else {
					strs = append(strs, string(e.Value))
				}
			}
			if strings.Join(strs, "|") != strings.Join(tc.want, "|") || len(strs) != len(tc.want) {
				t.Errorf("ParseArray(%q) = %q, want %q", tc.in, strs, tc.want)
			}
		})
	}
}

// formatArray writes elems as PostgreSQL's array_out would (always
// quoting), for the round-trip property of the fuzz test.
func formatArray(elems []ArrayElem) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		if e.Null {
			b.WriteString("NULL")
			continue
		}
		b.WriteByte('"')
		for _, c := range e.Value {
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.Bytes()
}

func FuzzParseArray(f *testing.F) {
	for _, s := range []string{``, `{`, `}`, `{}`, `{1,2,3}`, `{"a\"b",NULL,"NULL"}`, `{{1,2},{3,4}}`, `[0:1]={a,b}`,
		`{1,2}garbage`, `{"unterminated`, `{a\`, `{{{{{{{1}}}}}}}`, `{ "x" , y }`, "{\xff\x00}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		elems, nd, err := ParseArray(in, ',')
		if err != nil {
			if len(elems) != 0 || nd != 0 {
				t.Fatalf("error %v with results", err)
			}
			return
		}
		if nd < 0 || nd > 6 || (nd == 0) != (len(elems) == 0) {
			t.Fatalf("ndims %d with %d elements", nd, len(elems))
		}
		// Re-formatting the elements as a one-dimensional literal and
		// parsing that gives the same elements back.
		again, _, err := ParseArray(formatArray(elems), ',')
		if err != nil {
			t.Fatalf("re-parse of %q: %v", formatArray(elems), err)
		}
		if len(again) != len(elems) {
			t.Fatalf("re-parse gave %d elements, want %d", len(again), len(elems))
		}
		for i := range elems {
			if again[i].Null != elems[i].Null || !bytes.Equal(again[i].Value, elems[i].Value) {
				t.Fatalf("element %d: %+v != %+v", i, again[i], elems[i])
			}
		}
	})
}

func FuzzParseScalars(f *testing.F) {
	for _, s := range []string{"", "2024-01-01", "2024-01-01 00:00:00+05:30", "1 year -00:00:01", `\x00`, "12:00:00", "1.5", "infinity"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// None of these may panic, whatever the input.
		_, _ = ParseDate(in)
		_, _ = ParseTimestamp(in)
		_, _ = ParseTimestamptz(in)
		_, _ = ParseTime(in)
		_, _ = ParseInterval(in)
		_, _ = ParseBytea(in)
		_, _ = ParseDecimal(in, 38, 10)
		_, _ = ParseDecimal(in, 5, 0)
	})
}
