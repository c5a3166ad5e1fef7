package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

func streamTestRecord(t *testing.T, from, n int) arrow.Record {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := from; i < from+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%3 == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(strings.Repeat("x", i%7) + "\ny,\"")
		}
	}
	return b.NewRecord()
}

// TestStreamMatchesRows: records streamed one after the other print as
// Rows prints them all at once (the header once), for every format, with
// repeats.
func TestStreamMatchesRows(t *testing.T) {
	all := streamTestRecord(t, 0, 30)
	defer all.Release()
	repeat := func(i int) int64 { return int64(i % 3) }
	for _, format := range Formats {
		var want bytes.Buffer
		if err := Rows(&want, format, all, repeat); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		s, err := NewStream(&got, format, all.Schema().Fields())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int64{{0, 7}, {7, 8}, {8, 30}} {
			part := all.NewSlice(r[0], r[1])
			off := int(r[0])
			err := s.Write(part, func(i int) int64 { return repeat(off + i) })
			part.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%s:\nstreamed\n%s\nRows\n%s", format, got.String(), want.String())
		}
	}
}

// TestStreamTableWindow: a table longer than the window prints every
// row, columns at least as wide as the window's widest value.
func TestStreamTableWindow(t *testing.T) {
	var got bytes.Buffer
	rec := streamTestRecord(t, 0, tableWindow+10)
	defer rec.Release()
	s, err := NewStream(&got, "table", rec.Schema().Fields())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(rec, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n")
	if len(lines) != tableWindow+11 {
		t.Fatalf("%d lines, want %d (header and rows)", len(lines), tableWindow+11)
	}
	if !strings.HasPrefix(lines[len(lines)-1], "4105") {
		t.Fatalf("last line %q, want the row with id 4105", lines[len(lines)-1])
	}
}
