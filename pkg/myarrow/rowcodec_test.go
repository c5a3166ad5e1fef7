package myarrow

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// codecTable has a column of every Arrow type myarrow maps to.
func codecTable(t *testing.T) *Table {
	cols := []*Column{
		col(t, "tinyint", "tinyint(4)", 0, 0, "", 0), col(t, "tinyint", "tinyint(3) unsigned", 0, 0, "", 0),
		col(t, "smallint", "smallint(6)", 0, 0, "", 0), col(t, "smallint", "smallint(5) unsigned", 0, 0, "", 0),
		col(t, "int", "int(11)", 0, 0, "", 0), col(t, "int", "int(10) unsigned", 0, 0, "", 0),
		col(t, "bigint", "bigint(20)", 0, 0, "", 0), col(t, "bigint", "bigint(20) unsigned", 0, 0, "", 0),
		col(t, "float", "float", 0, 0, "", 0), col(t, "double", "double", 0, 0, "", 0),
		col(t, "decimal", "decimal(10,2)", 10, 2, "", 0), col(t, "varchar", "varchar(20)", 0, 0, "utf8mb4", 80),
		col(t, "blob", "blob", 0, 0, "", 0), col(t, "date", "date", 0, 0, "", 0),
		col(t, "datetime", "datetime(6)", 0, 0, "", 0), col(t, "time", "time", 0, 0, "", 0),
		col(t, "enum", "enum('a','b')", 0, 0, "utf8mb4", 4),
	}
	tb := &Table{Schema: "db", Name: "t", PrimaryKey: []int{4}}
	for i, c := range cols {
		c.Name = string(rune('a' + i))
		c.Nullable = i != 4
		tb.Columns = append(tb.Columns, *c)
	}
	return tb
}

// TestRowCodec: a binlog row encodes as the Arrow values it converts
// to, and AppendEncoded builds those values again.
func TestRowCodec(t *testing.T) {
	tb := codecTable(t)
	rows := [][]any{
		{int8(-3), int8(-1), int16(-7), int16(-1), int32(5), int32(-1), int64(-9), int64(-1), float32(1.5), 2.25, "12.34", "héllo", []byte{0, 1},
			"2024-02-29", "2024-02-29 10:11:12.123456", "-01:02:03", int64(2)},
		{nil, nil, nil, nil, int32(6), nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil},
	}
	rb := NewRowBuilder(memory.DefaultAllocator, tb, frontier.DomainMariaDB, "s")
	defer rb.Release()
	codec := NewRowCodec(tb)
	var enc [][]byte
	for _, r := range rows {
		if err := rb.AppendBinlog(r, 1, 1, "0"); err != nil {
			t.Fatal(err)
		}
		var row []byte
		for i, v := range r {
			var err error
			if row, err = codec.AppendBinlog(row, i, v); err != nil {
				t.Fatalf("column %d: %v", i, err)
			}
		}
		enc = append(enc, row)
	}
	rec := rb.NewRecord()
	defer rec.Release()
	for j := range rows {
		var row []byte
		for i := range tb.Columns {
			var err error
			if row, err = codec.AppendArrow(row, i, rec.Column(i), j); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(row, enc[j]) {
			t.Errorf("row %d: binlog encodes as %x, its Arrow values as %x", j, enc[j], row)
		}
		if err := rb.AppendEncoded(row, 1, 1, "0"); err != nil {
			t.Fatal(err)
		}
	}
	again := rb.NewRecord()
	defer again.Release()
	for i := range tb.Columns {
		if !array.Equal(rec.Column(i), again.Column(i)) {
			t.Errorf("column %s: AppendEncoded built %v, want %v", tb.Columns[i].Name, again.Column(i), rec.Column(i))
		}
	}
	if err := rb.AppendEncoded(enc[0][:len(enc[0])-1], 1, 1, "0"); err == nil || rb.Rows() != 0 {
		t.Errorf("a cut row: %v, %d rows appended", err, rb.Rows())
	}
	if _, err := codec.AppendValue(nil, 4, nil); err == nil {
		t.Errorf("NULL in the NOT NULL column: no error")
	}
}

// TestColumnDefaults: information_schema's COLUMN_DEFAULT as MariaDB and
// MySQL print it, to the value an INSERT that leaves the column out
// stores.
func TestColumnDefaults(t *testing.T) {
	tb := codecTable(t)
	cases := []struct {
		col        int
		def        string
		null       bool
		extra      string
		want       any
		noConstant bool
	}{
		{4, "5", false, "", int64(5), false},
		{11, "'it''s'", false, "", "it's", false},          // MariaDB
		{11, "plain", false, "", "plain", false},           // MySQL
		{11, "NULL", false, "", nil, false},                // MariaDB DEFAULT NULL
		{11, "", true, "", nil, false},                     // MySQL DEFAULT NULL (nullable)
		{4, "", true, "", nil, true},                       // NOT NULL without one
		{14, "current_timestamp(6)", false, "", nil, true}, // MariaDB expression
		{14, "CURRENT_TIMESTAMP", false, "DEFAULT_GENERATED", nil, true},
		{13, "'2020-01-02'", false, "", int64(18263), false},
		{16, "'b'", false, "", "b", false},
		{10, "1.50", false, "", nil, false},
	}
	for _, c := range cases {
		cl := tb.Columns[c.col]
		cl.readDefault(c.def, c.null, c.extra)
		got, err := cl.DefaultValue()
		if c.noConstant {
			if !errors.Is(err, ErrNoDefault) {
				t.Errorf("%s DEFAULT %q: %v, %v; want ErrNoDefault", cl.ColumnType, c.def, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s DEFAULT %q: %v", cl.ColumnType, c.def, err)
			continue
		}
		if c.col == 10 {
			if _, err := NewRowCodec(tb).AppendValue(nil, 10, got); err != nil {
				t.Errorf("decimal default: %v", err)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s DEFAULT %q: %#v, want %#v", cl.ColumnType, c.def, got, c.want)
		}
	}
}
