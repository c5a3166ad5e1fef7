package pgarrow_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pgarrow/pgarrowtest"
)

// TestRowCodecEveryType: a row encoded from its text form and from the
// Arrow arrays it converts to encodes to the same bytes, and appending the
// encoding gives the arrays that appending the text gives.
func TestRowCodecEveryType(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	conn := connect(t, pg.CreateDatabase(t))
	ctx := t.Context()
	if _, err := conn.Exec(ctx, pgarrowtest.Setup); err != nil {
		t.Fatal(err)
	}
	for _, q := range pgarrowtest.Inserts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tbl, err := pgarrow.LoadTable(ctx, conn, "public.every")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(pgarrowtest.Columns, ", ")+" FROM every ORDER BY id", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	codec := pgarrow.NewRowCodec(tbl)
	fromText, err := pgarrow.NewRowBuilder(memory.DefaultAllocator, tbl)
	if err != nil {
		t.Fatal(err)
	}
	defer fromText.Release()
	fromEnc, err := pgarrow.NewRowBuilder(memory.DefaultAllocator, tbl)
	if err != nil {
		t.Fatal(err)
	}
	defer fromEnc.Release()
	var encoded [][]byte
	for rows.Next() {
		raw := rows.RawValues()
		vals := make([][]byte, len(raw))
		nulls := make([]bool, len(raw))
		var enc []byte
		for i, r := range raw {
			vals[i], nulls[i] = r, r == nil
			if enc, err = codec.AppendText(enc, i, r, r == nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := fromText.AppendText(vals, nulls); err != nil {
			t.Fatal(err)
		}
		if err := fromEnc.AppendEncoded(enc); err != nil {
			t.Fatal(err)
		}
		encoded = append(encoded, enc)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	a, b := fromText.NewArrays(), fromEnc.NewArrays()
	var types []arrow.DataType
	for _, arr := range a {
		types = append(types, arr.DataType())
		defer arr.Release()
	}
	for _, arr := range b {
		defer arr.Release()
	}
	if err := codec.CheckTypes(types); err != nil {
		t.Fatal(err)
	}
	for r, enc := range encoded {
		var fromArrow []byte
		off := 0
		for i := range a {
			if got, want := pgarrow.GoValue(b[i], r), pgarrow.GoValue(a[i], r); !sameValue(got, want) {
				t.Errorf("row %d column %s: from the encoding %#v, from text %#v", r+1, tbl.Columns[i].Name, got, want)
			}
			if fromArrow, err = codec.AppendArrow(fromArrow, i, a[i], r); err != nil {
				t.Fatal(err)
			}
			n, err := codec.Len(enc[off:], i)
			if err != nil {
				t.Fatalf("row %d column %s: %v", r+1, tbl.Columns[i].Name, err)
			}
			off += n
		}
		if off != len(enc) {
			t.Errorf("row %d: columns take %d of %d bytes", r+1, off, len(enc))
		}
		if !bytes.Equal(fromArrow, enc) {
			t.Errorf("row %d: encoded from Arrow %x, from text %x", r+1, fromArrow, enc)
		}
	}
	// A truncated row appends nothing.
	if err := fromEnc.AppendEncoded(encoded[0][:len(encoded[0])-1]); err == nil || fromEnc.Len() != 0 {
		t.Errorf("truncated row: err %v, %d rows appended", err, fromEnc.Len())
	}
}
