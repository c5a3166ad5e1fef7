// Package pgarrowtest holds a PostgreSQL table with a column of every
// mapped type, edge-case rows for it and the Arrow values pgarrow must
// produce for them, shared by the integration tests of pgarrow, replicate
// and snapshot.
package pgarrowtest

import (
	"math"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
)

// Setup creates the enum mood, the domain posint and the table public.every.
const Setup = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE every (
	id   int4 PRIMARY KEY,
	i2   int2, i4 int4, i8 int8, o oid, f4 float4, f8 float8,
	n    numeric(10,2), nb numeric, n38 numeric(38,5),
	t    text, vc varchar(10), bp char(3), nm name, b bool, by bytea,
	d    date, tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval,
	u    uuid, j json, jb jsonb, e mood, dom posint,
	ai   int4[], at text[], an numeric(5,1)[], ad date[], ats timestamptz[],
	ab   bytea[], ae mood[], am int4[], pt point, pta point[]
);`

// Columns lists the columns of public.every in order.
var Columns = []string{"id", "i2", "i4", "i8", "o", "f4", "f8", "n", "nb", "n38", "t", "vc", "bp", "nm", "b", "by",
	"d", "tm", "ttz", "ts", "tstz", "iv", "u", "j", "jb", "e", "dom",
	"ai", "at", "an", "ad", "ats", "ab", "ae", "am", "pt", "pta"}

// Inserts insert rows 1, 2 (all NULL but id) and 3.
var Inserts = []string{
	`INSERT INTO every VALUES (1,
		-32768, 2147483647, -9223372036854775808, 4294967295, 'NaN', '-Infinity',
		12345678.91, 'NaN', -123456789012345678901234567890123.45678,
		E'multi\nline "quoted" \\ back \u2603', 'abc', 'ab', 'name', true, '\x00ff5c22',
		'4714-11-24 BC', '24:00:00', '12:34:56.789+05:30', '2024-02-29 12:34:56.123456', '2024-02-29 12:34:56.5+05:30',
		'1 year 2 months 3 days 04:05:06.789',
		'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2]}', '{"b": 2, "a": 1}', 'happy', 42,
		'{1,NULL,3}', '{"a b","c\"d",NULL,"NULL",""}', '{1.5,-2.0,NULL}', '{2024-01-01,infinity}', '{"2024-01-01 00:00:00+00"}',
		'{"\\x0102"}', '{sad,happy}', '{{1,2},{3,4}}', '(1,2)', '{"(1,2)","(3,4)"}')`,
	`INSERT INTO every (id) VALUES (2)`,
	`INSERT INTO every VALUES (3,
		32767, -2147483648, 0, 0, '3.4028235e+38', '1.5e-300',
		-0.01, '123456789012345678901234567890.123456789012345678901234567890', 0,
		'', '', '', '', false, '',
		'infinity', '00:00:00', '00:00:00-03', '-infinity', '0044-03-15 12:00:00+00 BC',
		'-1 days +02:03:00',
		'00000000-0000-0000-0000-000000000000', 'null', '[]', 'sad', 1,
		'{}', '{}', '{}', NULL, '{infinity}',
		'{NULL}', '{}', '[0:1]={7,8}', NULL, NULL)`,
}

func us(y int, m time.Month, d, h, mi, s, ns int) int64 {
	return time.Date(y, m, d, h, mi, s, ns, time.UTC).UnixMicro()
}

func days(y int, m time.Month, d int) int32 {
	return int32(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

// Expected are the values (as pgarrow.GoValue returns them) of rows 1, 2
// and 3, in column order.
var Expected = [][]any{
	{int32(1),
		int16(-32768), int32(2147483647), int64(math.MinInt64), uint32(4294967295), float32(math.NaN()), math.Inf(-1),
		"12345678.91", "NaN", "-123456789012345678901234567890123.45678",
		"multi\nline \"quoted\" \\ back \u2603", "abc", "ab ", "name", true, []byte{0, 0xff, 0x5c, 0x22},
		days(-4713, 11, 24), int64(86400000000), "12:34:56.789+05:30", us(2024, 2, 29, 12, 34, 56, 123456000), us(2024, 2, 29, 7, 4, 56, 500000000),
		arrow.MonthDayNanoInterval{Months: 14, Days: 3, Nanoseconds: (4*3600+5*60+6)*1e9 + 789e6},
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", `{"a": [1, 2]}`, `{"a": 1, "b": 2}`, "happy", int32(42),
		[]any{int32(1), nil, int32(3)}, []any{"a b", `c"d`, nil, "NULL", ""}, []any{"1.5", "-2.0", nil},
		[]any{days(2024, 1, 1), int32(math.MaxInt32)}, []any{us(2024, 1, 1, 0, 0, 0, 0)},
		[]any{[]byte{1, 2}}, []any{"sad", "happy"}, []any{int32(1), int32(2), int32(3), int32(4)}, "(1,2)", `{"(1,2)","(3,4)"}`},
	append([]any{int32(2)}, make([]any, len(Columns)-1)...),
	{int32(3),
		int16(32767), int32(-2147483648), int64(0), uint32(0), float32(math.MaxFloat32), 1.5e-300,
		"-0.01", "123456789012345678901234567890.123456789012345678901234567890", "0.00000",
		"", "", "   ", "", false, []byte{},
		int32(math.MaxInt32), int64(0), "00:00:00-03", int64(math.MinInt64), us(-43, 3, 15, 12, 0, 0, 0),
		arrow.MonthDayNanoInterval{Days: -1, Nanoseconds: (2*3600 + 3*60) * 1e9},
		"00000000-0000-0000-0000-000000000000", "null", "[]", "sad", int32(1),
		[]any{}, []any{}, []any{}, nil, []any{int64(math.MaxInt64)},
		[]any{nil}, []any{}, []any{int32(7), int32(8)}, nil, nil},
}
