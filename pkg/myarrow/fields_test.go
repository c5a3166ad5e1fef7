package myarrow

import (
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
)

// TestTableFromFields: the columns an earlier description gave (a
// store's fields) describe the table again, the catalog's column taken
// where it is unchanged, the others rebuilt from their column type; a
// field whose type its column type does not give is refused.
func TestTableFromFields(t *testing.T) {
	field := func(name, ct string, dt arrow.DataType, null bool) arrow.Field {
		return arrow.Field{Name: name, Type: dt, Nullable: null, Metadata: arrow.NewMetadata([]string{MetaType}, []string{ct})}
	}
	latin1, err := LookupCharset("latin1")
	if err != nil {
		t.Fatal(err)
	}
	like := &Table{Schema: "d", Name: "t", Columns: []Column{
		{Name: "id", DataType: "bigint", ColumnType: "bigint(20)", Kind: KindInt, Bits: 64, Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", DataType: "varchar", ColumnType: "varchar(40)", Nullable: true, Kind: KindString, Charset: latin1, Type: arrow.BinaryTypes.String},
	}, PrimaryKey: []int{0}}
	got, err := TableFromFields("d", "t", []arrow.Field{
		field("id", "int(11)", arrow.PrimitiveTypes.Int32, false),
		field("s", "varchar(10)", arrow.BinaryTypes.String, true),
		field("amount", "decimal(12,3) unsigned", &arrow.Decimal128Type{Precision: 12, Scale: 3}, true),
		field("u", "smallint(5) unsigned", arrow.PrimitiveTypes.Uint16, false),
		field("e", "enum('a','b,c')", arrow.BinaryTypes.String, true),
		field("b", "binary(4)", arrow.BinaryTypes.Binary, true),
		field("bits", "bit(3)", arrow.PrimitiveTypes.Uint64, true),
	}, like)
	if err != nil {
		t.Fatal(err)
	}
	c := got.Columns
	switch {
	case c[0].Kind != KindInt || c[0].Bits != 32:
		t.Errorf("id: %+v", c[0])
	case c[1].Charset != latin1:
		t.Errorf("s: charset %v, want the catalog's latin1", c[1].Charset)
	case c[2].Kind != KindDecimal || c[2].Precision != 12 || c[2].Scale != 3:
		t.Errorf("amount: %+v", c[2])
	case c[3].Kind != KindUint || c[3].Bits != 16:
		t.Errorf("u: %+v", c[3])
	case c[4].Kind != KindEnum || len(c[4].Values) != 2 || c[4].Values[1] != "b,c":
		t.Errorf("e: %+v", c[4])
	case c[5].Kind != KindBinary || c[5].Length != 4:
		t.Errorf("b: %+v", c[5])
	case c[6].Kind != KindBit || c[6].Bits != 3:
		t.Errorf("bits: %+v", c[6])
	case len(got.PrimaryKey) != 1 || got.PrimaryKey[0] != 0:
		t.Errorf("primary key %v", got.PrimaryKey)
	}
	same, err := TableFromFields("d", "t", like.Fields(), like)
	if err != nil || same.Columns[1].Charset != latin1 || same.Columns[0].ColumnType != "bigint(20)" {
		t.Fatalf("unchanged columns: %+v, %v", same, err)
	}
	if _, err := TableFromFields("d", "t", []arrow.Field{field("id", "int(11)", arrow.PrimitiveTypes.Int64, false)}, nil); err == nil {
		t.Fatal("int(11) as int64: no error")
	}
}
