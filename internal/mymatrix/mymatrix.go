// Package mymatrix is the MariaDB type matrix of the tests: every column
// type rtrctl maps, each with its boundary values as SQL literals. The
// snapshot and binlog tests (pkg/snapshot) and the Parquet export test
// (cmd/rtrctl) run it against a real server.
package mymatrix

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// Case is one boundary value: a SQL expression stored into the column.
type Case struct{ Name, Expr string }

// Type is a column type with its boundary values.
type Type struct {
	Name, DDL string
	// SQLMode, when set, is the session sql_mode of the inserts
	// (NO_ENGINE_SUBSTITUTION: not strict, zero dates allowed).
	SQLMode string
	Cases   []Case
}

// Types is every MariaDB type with its boundary values.
var Types = func() []Type {
	ints := func(name, lo, hi, ulo, uhi string) []Type {
		return []Type{
			{Name: name, DDL: name, Cases: []Case{{"min", lo}, {"max", hi}, {"zero", "0"}, {"minus_one", "-1"}, {"null", "NULL"}}},
			{Name: name + "_unsigned", DDL: name + " unsigned", Cases: []Case{{"min", ulo}, {"max", uhi}}},
		}
	}
	var out []Type
	out = append(out, ints("tinyint", "-128", "127", "0", "255")...)
	out = append(out, ints("smallint", "-32768", "32767", "0", "65535")...)
	out = append(out, ints("mediumint", "-8388608", "8388607", "0", "16777215")...)
	out = append(out, ints("int", "-2147483648", "2147483647", "0", "4294967295")...)
	out = append(out, ints("bigint", "-9223372036854775808", "9223372036854775807", "0", "18446744073709551615")...)
	nines := func(n int) string { return strings.Repeat("9", n) }
	out = append(out,
		Type{Name: "decimal_38_0", DDL: "decimal(38,0)", Cases: []Case{{"max", nines(38)}, {"min", "-" + nines(38)}, {"zero", "0"}}},
		Type{Name: "decimal_38_38", DDL: "decimal(38,38)", Cases: []Case{{"max", "0." + nines(38)}, {"min", "-0." + nines(38)}, {"tiny", "0." + strings.Repeat("0", 37) + "1"}}},
		Type{Name: "decimal_38_10", DDL: "decimal(38,10)", Cases: []Case{{"max", nines(28) + "." + nines(10)}, {"min", "-" + nines(28) + "." + nines(10)}}},
		Type{Name: "decimal_65_30", DDL: "decimal(65,30)", Cases: []Case{{"max", nines(35) + "." + nines(30)}, {"min", "-" + nines(35) + "." + nines(30)}, {"zero", "0"}, {"tiny", "-0." + strings.Repeat("0", 29) + "1"}}},
		Type{Name: "decimal_65_0", DDL: "decimal(65,0)", Cases: []Case{{"max", nines(65)}, {"min", "-" + nines(65)}}},
		Type{Name: "float", DDL: "float", Cases: []Case{{"max", "3.40282e38"}, {"min", "-3.40282e38"}, {"minus_zero", "-0e0"}, {"small", "1.17549e-38"}, {"tenth", "0.1"}}},
		Type{Name: "double", DDL: "double", Cases: []Case{{"max", "1.7976931348623157e308"}, {"min", "-1.7976931348623157e308"}, {"minus_zero", "-0e0"},
			{"smallest_normal", "2.2250738585072014e-308"}, {"subnormal", "4.9e-324"}, {"pi", "3.141592653589793"}}},
		Type{Name: "bit_1", DDL: "bit(1)", Cases: []Case{{"zero", "b'0'"}, {"one", "b'1'"}}},
		Type{Name: "bit_64", DDL: "bit(64)", Cases: []Case{{"all_ones", "x'ffffffffffffffff'"}, {"high_bit", "x'8000000000000000'"}, {"zero", "0"}}},
		Type{Name: "year", DDL: "year", Cases: []Case{{"zero", "0"}, {"min", "1901"}, {"max", "2155"}}},
		Type{Name: "date", DDL: "date", Cases: []Case{{"min", "'1000-01-01'"}, {"max", "'9999-12-31'"}, {"epoch", "'1970-01-01'"}, {"leap", "'2024-02-29'"}}},
		Type{Name: "date_zero", DDL: "date", SQLMode: "NO_ENGINE_SUBSTITUTION", Cases: []Case{{"zero", "'0000-00-00'"}, {"zero_day", "'2024-01-00'"}, {"zero_month", "'2024-00-15'"}}},
		Type{Name: "time", DDL: "time", Cases: []Case{{"min", "'-838:59:59'"}, {"max", "'838:59:59'"}, {"zero", "'00:00:00'"}}},
		Type{Name: "time_6", DDL: "time(6)", Cases: []Case{{"min", "'-838:59:59.000000'"}, {"max", "'838:59:59.000000'"}, {"minus_fraction", "'-00:00:00.000001'"}, {"fraction", "'12:34:56.999999'"}}},
		Type{Name: "timestamp_max", DDL: "timestamp(6) NULL", Cases: []Case{{"max", "'2038-01-19 03:14:07.999999'"}, {"min", "'1970-01-01 00:00:01.000000'"}}},
		Type{Name: "timestamp_zero", DDL: "timestamp NULL", SQLMode: "NO_ENGINE_SUBSTITUTION", Cases: []Case{{"zero", "'0000-00-00 00:00:00'"}}},
		Type{Name: "datetime_zero", DDL: "datetime", SQLMode: "NO_ENGINE_SUBSTITUTION", Cases: []Case{{"zero", "'0000-00-00 00:00:00'"}}},
		Type{Name: "json", DDL: "json", Cases: []Case{{"object", `'{"a": [1, 2.5, "x"], "b": null}'`}, {"unicode", `'{"k": "héllo 😀 中文", "e": "\\u00e9"}'`}, {"scalar", `'"s"'`}, {"empty_array", "'[]'"}}},
		Type{Name: "enum_emoji", DDL: "enum('a','😀','é','x?y')", Cases: []Case{{"ascii", "'a'"}, {"emoji", "'😀'"}, {"latin", "'é'"}, {"question_mark", "'x?y'"}, {"invalid_is_empty", "''"}}, SQLMode: "NO_ENGINE_SUBSTITUTION"},
		Type{Name: "enum_latin1", DDL: "enum('é','ü') CHARACTER SET latin1", Cases: []Case{{"e", "'é'"}, {"u", "'ü'"}}},
		Type{Name: "set_emoji", DDL: "set('😀','b','🎉x')", Cases: []Case{{"one", "'😀'"}, {"all", "'😀,b,🎉x'"}, {"none", "''"}}},
		Type{Name: "binary_4", DDL: "binary(4)", Cases: []Case{{"padded", "'ab'"}, {"full", "x'00ff10ee'"}, {"empty", "''"}}},
		Type{Name: "varbinary", DDL: "varbinary(300)", Cases: []Case{{"all_bytes", "x'" + func() string {
			var b []byte
			for i := range 256 {
				b = append(b, byte(i))
			}
			return hex.EncodeToString(b)
		}() + "'"}, {"empty", "''"}}},
		Type{Name: "mediumblob", DDL: "mediumblob", Cases: []Case{{"long", "repeat(x'00ff', 40000)"}}},
		Type{Name: "longtext", DDL: "longtext", Cases: []Case{{"long", "repeat('é😀', 50000)"}}},
	)
	for fsp := 0; fsp <= 6; fsp++ {
		frac := ""
		if fsp > 0 {
			frac = "." + strings.Repeat("9", fsp)
		}
		out = append(out,
			Type{Name: fmt.Sprintf("datetime_%d", fsp), DDL: fmt.Sprintf("datetime(%d)", fsp), Cases: []Case{
				{"min", "'1000-01-01 00:00:00'"}, {"max", "'9999-12-31 23:59:59" + frac + "'"}, {"epoch", "'1970-01-01 00:00:00'"}, {"before_epoch", "'1969-12-31 23:59:59" + frac + "'"}}},
			Type{Name: fmt.Sprintf("timestamp_%d", fsp), DDL: fmt.Sprintf("timestamp(%d) NULL", fsp), Cases: []Case{
				{"min", "'1970-01-01 00:00:01'"}, {"max", "'2038-01-19 03:14:07" + frac + "'"}}},
		)
	}
	return out
}()
