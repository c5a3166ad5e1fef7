package myarrow

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The fuzz targets feed the text-form decoders arbitrary input: they must
// never panic, and what they accept must be consistent.

func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0", "-0.5", strings.Repeat("9", 38), "-" + strings.Repeat("9", 38), "0." + strings.Repeat("9", 38), "1e5", "", "-", "."} {
		f.Add(s, 38, 10)
	}
	f.Fuzz(func(t *testing.T, s string, prec, scale int) {
		if prec < 1 || prec > 38 || scale < 0 || scale > prec {
			return
		}
		n, err := ParseDecimal(s, prec, scale)
		if err != nil {
			return
		}
		// Accepted: printing it and reading it back gives the same number.
		back, err := ParseDecimal(n.ToString(int32(scale)), prec, scale)
		if err != nil || back != n {
			t.Fatalf("%q -> %s -> %v %v", s, n.ToString(int32(scale)), back, err)
		}
	})
}

func FuzzParseDatetime(f *testing.F) {
	for _, s := range []string{"1000-01-01 00:00:00", "9999-12-31 23:59:59.999999", "2038-01-19 03:14:07.999999", "0000-00-00 00:00:00", "2024-02-31 00:00:00", "1970-01-01 00:00:00.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseDatetime(s)
		if err == nil && v != nil {
			if _, err := ParseDate(s[:10]); err != nil {
				t.Fatalf("%q accepted as a datetime, its date not: %v", s, err)
			}
		}
	})
}

func FuzzParseDate(f *testing.F) {
	for _, s := range []string{"1000-01-01", "9999-12-31", "0000-00-00", "2024-02-29", "2023-02-29", "2024-13-01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseDate(s)
		if err == nil && v != nil && len(s) == 10 {
			// An accepted date is a real day: it prints back as itself.
			if got := dayString(v.(int64)); got != s && !strings.HasPrefix(s, "+") {
				if _, e := ParseDate(got); e != nil {
					t.Fatalf("%q -> %d -> %q", s, v, got)
				}
			}
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"-838:59:59.000000", "838:59:59", "00:00:00.000001", "-00:00:00.5", "12:34:56.999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { _, _ = ParseTime(s) })
}

func FuzzConvertEnumSet(f *testing.F) {
	for _, s := range []string{"0", "1", "2", "3", "18446744073709551615", "x", ""} {
		f.Add(s)
	}
	en := &Column{Name: "e", Kind: KindEnum, DataType: "enum", Values: []string{"a", "😀"}}
	st := &Column{Name: "s", Kind: KindSet, DataType: "set", Values: []string{"a", "😀", "c"}}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := Convert(en, []byte(s)); err == nil && v != "" && v != "a" && v != "😀" {
			t.Fatalf("enum %q -> %v", s, v)
		}
		if v, err := Convert(st, []byte(s)); err == nil && len(v.(string)) > len("a,😀,c") {
			t.Fatalf("set %q -> %v", s, v)
		}
	})
}

func FuzzConvertBitYear(f *testing.F) {
	for _, s := range []string{"0", "1", "18446744073709551615", "2155", "1901", "-1"} {
		f.Add(s)
	}
	bit := &Column{Name: "b", Kind: KindBit, DataType: "bit", Bits: 64}
	f.Fuzz(func(t *testing.T, s string) { _, _ = Convert(bit, []byte(s)) })
}

func FuzzCharsetDecode(f *testing.F) {
	for _, s := range [][]byte{[]byte("café"), {0x81, 0x8d, 0x8f, 0x90, 0x9d}, {0x81, 0x5f, 0x81, 0x60}, {0xd8, 0x3d, 0xde, 0x00}, {0x00, 0x01, 0xf6, 0x00}, {0xff}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range Charsets() {
			if s := c.Decode(b); !utf8.ValidString(s) && !c.utf8 {
				t.Fatalf("%s: %x decodes to invalid UTF-8 %q", c.Name, b, s)
			}
		}
	})
}

func dayString(days int64) string {
	return time.Unix(days*86400, 0).UTC().Format("2006-01-02")
}
