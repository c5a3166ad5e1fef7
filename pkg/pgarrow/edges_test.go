package pgarrow

import (
	"math"
	"strings"
	"testing"
)

// The edges of PostgreSQL's timestamp range against Arrow's timestamp[us]:
// int64 microseconds since 1970 whose maximum is the infinity sentinel.
func TestParseTimestampEdges(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		tz       bool
		want     int64
		err      string // a part of the error; "" for none
	}{
		{"last representable", "294247-01-10 04:00:54.775806", false, math.MaxInt64 - 1, ""},
		{"last representable tz", "294247-01-10 04:00:54.775806+00", true, math.MaxInt64 - 1, ""},
		{"the infinity sentinel is not a finite value", "294247-01-10 04:00:54.775807", false, 0, "out of range"},
		{"after the sentinel", "294247-01-10 04:00:54.775808", false, 0, "out of range"},
		{"day after", "294247-01-11 00:00:00", false, 0, "out of range"},
		{"PostgreSQL's maximum", "294276-12-31 23:59:59.999999", false, 0, "out of range"},
		{"PostgreSQL's maximum tz", "294276-12-31 23:59:59.999999+00", true, 0, "out of range"},
		{"offset pushes it out", "294247-01-10 00:00:54.775807-04", true, 0, "out of range"},
		{"offset pulls it in", "294247-01-10 05:00:54.775806+01", true, math.MaxInt64 - 1, ""},
		{"PostgreSQL's minimum", "4714-11-24 00:00:00 BC", false, -210866803200000000, ""},
		{"PostgreSQL's minimum tz", "4714-11-24 00:00:00+00 BC", true, -210866803200000000, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got int64
			var err error
			if tc.tz {
				got, err = ParseTimestamptz([]byte(tc.in))
			} else {
				got, err = ParseTimestamp([]byte(tc.in))
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.in) {
					t.Fatalf("parse(%q) = %d, %v; want an error naming the value and %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseFloatEdges(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bits int
		want float64
	}{
		{"-0", 64, math.Copysign(0, -1)},
		{"-0", 32, math.Copysign(0, -1)},
		{"5e-324", 64, math.SmallestNonzeroFloat64},
		{"1e-45", 32, float64(math.SmallestNonzeroFloat32)},
		{"1.1754942e-38", 32, float64(float32(1.1754942e-38))},
		{"1.7976931348623157e+308", 64, math.MaxFloat64},
		{"3.4028235e+38", 32, float64(math.MaxFloat32)},
		{"Infinity", 64, math.Inf(1)},
		{"-Infinity", 32, math.Inf(-1)},
	} {
		got, err := ParseFloat([]byte(tc.in), tc.bits)
		if err != nil || math.Float64bits(got) != math.Float64bits(tc.want) {
			t.Errorf("ParseFloat(%q, %d) = %v (%x), %v; want %v", tc.in, tc.bits, got, math.Float64bits(got), err, tc.want)
		}
	}
	if got, err := ParseFloat([]byte("NaN"), 64); err != nil || !math.IsNaN(got) {
		t.Errorf("ParseFloat(NaN) = %v, %v", got, err)
	}
}

func TestParseDecimalEdges(t *testing.T) {
	for _, in := range []string{"NaN", "Infinity", "-Infinity"} {
		_, err := ParseDecimal([]byte(in), 10, 2)
		if err == nil || !strings.Contains(err.Error(), "not representable") {
			t.Errorf("ParseDecimal(%q) error = %v; want not representable", in, err)
		}
	}
	max38 := strings.Repeat("9", 38)
	if d, err := ParseDecimal([]byte("-"+max38), 38, 0); err != nil || d.ToString(0) != "-"+max38 {
		t.Errorf("ParseDecimal(-10^38+1) = %v, %v", d.ToString(0), err)
	}
	if d, err := ParseDecimal([]byte("11.00"), 10, 2); err != nil || d.ToString(2) != "11.00" {
		t.Errorf("ParseDecimal(11.00) = %v, %v", d.ToString(2), err)
	}
}

func TestParseIntervalEdges(t *testing.T) {
	for _, tc := range []struct {
		in  string
		err bool
	}{
		{"-178956970 years -8 mons -2147483648 days -2562047:47:16.854775", false},
		{"178956970 years 7 mons 2147483647 days 2562047:47:16.854775", false},
		{"2562047:47:16.854776", true},
		{"-2562047788:00:54.775808", true}, // PostgreSQL's minimum time part
		{"2562047788:00:54.775807", true},
	} {
		_, err := ParseInterval([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("ParseInterval(%q) error = %v, want error %v", tc.in, err, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), "out of range") {
			t.Errorf("ParseInterval(%q) error = %v, want out of range", tc.in, err)
		}
	}
}

func TestDescribeRow(t *testing.T) {
	tb := &Table{Schema: "public", Name: "t", Columns: []Column{{Name: "id"}, {Name: "ts"}, {Name: "note"}}}
	vals := [][]byte{[]byte("5"), []byte("294276-12-31 23:59:59"), nil}
	nulls := []bool{false, false, true}
	if got, want := DescribeRow(tb, []int{0}, vals, nulls), "key (id)=(5)"; got != want {
		t.Errorf("DescribeRow by key = %q, want %q", got, want)
	}
	if got, want := DescribeRow(tb, nil, vals, nulls), "row (id, ts, note)=(5, 294276-12-31 23:59:59, null)"; got != want {
		t.Errorf("DescribeRow without key = %q, want %q", got, want)
	}
}
