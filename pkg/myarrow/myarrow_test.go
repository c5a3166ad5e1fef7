package myarrow

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/rtrctl/rtrctl/internal/hint"
)

func TestValueList(t *testing.T) {
	got, err := parseValueList(`enum('a','b''c','d,e','')`)
	if err != nil || len(got) != 4 || got[1] != "b'c" || got[2] != "d,e" || got[3] != "" {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := parseValueList("enum('a"); err == nil {
		t.Fatal("unterminated accepted")
	}
}

func col(t *testing.T, dataType, columnType string, prec, scale int, cs string, octets int) *Column {
	t.Helper()
	c := &Column{Name: "c", DataType: dataType, ColumnType: columnType}
	if err := c.resolve(prec, scale, cs, octets); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConvert(t *testing.T) {
	type tc struct {
		c    *Column
		in   any
		want any
	}
	tiu := col(t, "tinyint", "tinyint(3) unsigned", 3, 0, "", 0)
	miu := col(t, "mediumint", "mediumint(8) unsigned", 7, 0, "", 0)
	bit := col(t, "bit", "bit(64)", 64, 0, "", 0)
	en := col(t, "enum", "enum('x','y')", 0, 0, "utf8mb4", 0)
	st := col(t, "set", "set('p','q','r')", 0, 0, "utf8mb4", 0)
	bn := col(t, "binary", "binary(4)", 0, 0, "binary", 4)
	dt := col(t, "date", "date", 0, 0, "", 0)
	ts := col(t, "timestamp", "timestamp(3)", 0, 0, "", 0)
	tm := col(t, "time", "time(3)", 0, 0, "", 0)
	f := col(t, "float", "float", 12, 0, "", 0)
	for i, c := range []tc{
		{tiu, int8(-1), uint64(255)},                // binlog: signed view
		{tiu, uint64(255), uint64(255)},             // text protocol
		{miu, int32(-1), uint64(16777215)},          // sign-extended 24 bits
		{bit, int64(-1), uint64(1<<64 - 1)},         // binlog
		{bit, uint64(1<<64 - 1), uint64(1<<64 - 1)}, // text (col + 0)
		{en, int64(2), "y"},
		{en, int64(0), ""},
		{en, []byte("1"), "x"}, // text protocol: (en + 0)
		{st, uint64(3), "p,q"},
		{st, int64(5), "p,r"},
		{st, int64(0), ""},
		{bn, []byte("ab"), []byte{'a', 'b', 0, 0}},
		{dt, "0000-00-00", nil},
		{dt, "1970-01-02", int64(1)},
		{ts, "1970-01-01 00:00:01.5", int64(1_500_000)},
		{ts, "0000-00-00 00:00:00", nil},
		{tm, "-838:59:59.000", int64(-3020399000000)},
		{tm, "00:00:00.001", int64(1000)},
		{f, float64(float32(0.1)), float32(0.1)},
		{f, float32(0.1), float32(0.1)},
		{f, nil, nil},
	} {
		got, err := Convert(c.c, c.in)
		if err != nil {
			t.Errorf("%d: %v", i, err)
			continue
		}
		if b, ok := c.want.([]byte); ok {
			if string(got.([]byte)) != string(b) {
				t.Errorf("%d: %v, want %v", i, got, b)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%d: %v (%T), want %v (%T)", i, got, got, c.want, c.want)
		}
	}
}

func TestParseDecimal(t *testing.T) {
	for _, c := range []struct {
		s     string
		p, sc int
		want  string
	}{
		{"-12345678901234.123456", 20, 6, "-12345678901234.123456"},
		{"0.5", 5, 2, "0.5"},
		{"7", 5, 2, "7"},
		{"1.230", 5, 2, "1.23"},
	} {
		n, err := ParseDecimal(c.s, c.p, c.sc)
		if err != nil {
			t.Fatalf("%s: %v", c.s, err)
		}
		if got := n.ToString(int32(c.sc)); got != c.want && got+"0" != c.want {
			// ToString keeps the scale's digits: compare numerically.
			if n2, _ := ParseDecimal(c.want, c.p, c.sc); n2 != n {
				t.Errorf("%s: %s", c.s, got)
			}
		}
	}
	for _, bad := range []string{"1.234", "1000", "x", ""} {
		if _, err := ParseDecimal(bad, 5, 2); err == nil {
			t.Errorf("%q accepted for decimal(5,2)", bad)
		}
	}
}

func TestTypesAndBinlogCheck(t *testing.T) {
	tb := &Table{Schema: "d", Name: "t", Columns: []Column{
		*col(t, "int", "int(11)", 10, 0, "", 0),
		*col(t, "decimal", "decimal(10,2)", 10, 2, "", 0),
		*col(t, "enum", "enum('a')", 0, 0, "utf8mb4", 0),
		*col(t, "varchar", "varchar(10)", 0, 0, "utf8mb4", 40),
	}}
	if got := tb.Columns[1].Type; !arrow.TypeEqual(got, &arrow.Decimal128Type{Precision: 10, Scale: 2}) {
		t.Fatalf("decimal type %s", got)
	}
	types := []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_VARCHAR}
	meta := []uint16{0, 10<<8 | 2, uint16(mysql.MYSQL_TYPE_ENUM)<<8 | 1, 40}
	if d := tb.CheckBinlogColumns(types, meta, nil); d != "" {
		t.Fatal(d)
	}
	if d := tb.CheckBinlogColumns(append(types, mysql.MYSQL_TYPE_LONG), append(meta, 0), nil); d == "" {
		t.Fatal("added column not seen")
	}
	if d := tb.CheckBinlogColumns([]byte{mysql.MYSQL_TYPE_LONGLONG, types[1], types[2], types[3]}, meta, nil); d == "" {
		t.Fatal("retyped column not seen")
	}
	if d := tb.CheckBinlogColumns(types, []uint16{0, 12<<8 | 2, meta[2], 40}, nil); d == "" {
		t.Fatal("decimal precision change not seen")
	}
	if d := tb.CheckBinlogColumns(types, meta, []string{"c", "c", "x", "c"}); d == "" {
		t.Fatal("renamed column not seen")
	}
	g := &Column{Name: "g", DataType: "geometry", ColumnType: "geometry"}
	if err := g.resolve(0, 0, "", 0); err == nil {
		t.Fatal("geometry accepted")
	}
}

func TestCharsetWithoutDecoder(t *testing.T) {
	c := &Column{Name: "v", DataType: "varchar", ColumnType: "varchar(5)"}
	err := c.resolve(0, 0, "swe7", 5)
	if !errors.Is(err, ErrCharset) || hint.Of(err) == "" || !strings.Contains(err.Error(), "swe7") {
		t.Fatalf("swe7 column: %v (hint %q)", err, hint.Of(err))
	}
	if got := col(t, "varchar", "varchar(5)", 0, 0, "latin1", 5).Charset.Decode([]byte{'c', 0xe9, 0x80, 0x81}); got != "cé€\u0081" {
		t.Fatalf("latin1 decodes to %q", got)
	}
}
