package store

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// TestPendingCopies: a pending copy reads back as written (schema with
// its metadata, rows), a missing one is not there, bad names are refused,
// and a sweep keeps what keep accepts and removes the rest, unfinished
// puts and files that do not read.
func TestPendingCopies(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	md := arrow.NewMetadata([]string{"rtr.kept.at"}, []string{"0/10"})
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, &md)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	rec := b.NewRecord()
	defer rec.Release()
	if err := s.PutPending("pg", "a.arrow", schema, []arrow.Record{rec, rec}); err != nil {
		t.Fatal(err)
	}
	got, recs, ok, err := s.Pending("pg", "a.arrow")
	if err != nil || !ok {
		t.Fatalf("read back: %v, %v", ok, err)
	}
	if !got.Equal(schema) || !got.Metadata().Equal(md) || len(recs) != 2 || !array.RecordEqual(recs[1], rec) {
		t.Fatalf("read back %s with %d records, want %s with 2 of %v", got, len(recs), schema, rec)
	}
	for _, r := range recs {
		r.Release()
	}
	if _, _, ok, err := s.Pending("pg", "b.arrow"); ok || err != nil {
		t.Fatalf("a missing copy: %v, %v", ok, err)
	}
	for _, bad := range []string{"", ".tmp-x", "../x", "a/b"} {
		if err := s.PutPending("pg", bad, schema, nil); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if err := s.PutPending("pg", "b.arrow", schema, nil); err != nil {
		t.Fatal(err)
	}
	pdir := filepath.Join(dir, "pending", "pg")
	for _, stray := range []string{".tmp-123", "c.arrow"} { // an unfinished put, a file that does not read
		if err := os.WriteFile(filepath.Join(pdir, stray), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	if err := s.SweepPending("pg", func(name string, m arrow.Metadata) bool {
		seen = append(seen, name)
		return name == "b.arrow" && m.Equal(md)
	}); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(pdir)
	if err != nil || len(es) != 1 || es[0].Name() != "b.arrow" {
		t.Fatalf("after the sweep %v (%v), want b.arrow alone; keep was asked of %v", es, err, seen)
	}
}
