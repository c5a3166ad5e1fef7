package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/ipc"
)

// castagnoli is the CRC-32C table batch checksums use.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Reserved column names of data batches.
const (
	TimeColumn = "_time"
	DiffColumn = "_diff"
	// PartitionColumn and UpperColumn are the columns of remap batches
	// (with TimeColumn).
	PartitionColumn = "_partition"
	UpperColumn     = "_upper"
)

var (
	timeField = arrow.Field{Name: TimeColumn, Type: arrow.PrimitiveTypes.Uint64}
	diffField = arrow.Field{Name: DiffColumn, Type: arrow.PrimitiveTypes.Int64}
)

// withColumns returns the user schema with extra fields appended, keeping
// its metadata.
func withColumns(user *arrow.Schema, extra ...arrow.Field) *arrow.Schema {
	fs := append(append([]arrow.Field(nil), user.Fields()...), extra...)
	md := user.Metadata()
	return arrow.NewSchema(fs, &md)
}

// encodeBatch writes records as one Arrow IPC file to w and returns the
// file's size and CRC-32C. It streams: a batch is never held twice in
// memory.
func encodeBatch(w io.Writer, recs ...arrow.Record) (size int64, crc uint32, err error) {
	bw := &batchWriter{buf: bufio.NewWriterSize(w, 1<<20)}
	fw, err := ipc.NewFileWriter(bw, ipc.WithSchema(recs[0].Schema()))
	if err != nil {
		return 0, 0, fmt.Errorf("encode batch: %w", err)
	}
	for _, rec := range recs {
		if err := fw.Write(rec); err != nil {
			return 0, 0, fmt.Errorf("encode batch: %w", err)
		}
	}
	if err := fw.Close(); err != nil {
		return 0, 0, fmt.Errorf("encode batch: %w", err)
	}
	if err := bw.buf.Flush(); err != nil {
		return 0, 0, fmt.Errorf("encode batch: %w", err)
	}
	return bw.n, bw.crc, nil
}

// batchWriter counts and checksums what the Arrow IPC file writer writes,
// and answers the one seek it makes (to learn the current position).
type batchWriter struct {
	buf *bufio.Writer
	n   int64
	crc uint32
	// group is the CRC-32C of what was written since it was last reset.
	group uint32
}

func (b *batchWriter) Write(p []byte) (int, error) {
	n, err := b.buf.Write(p)
	b.crc = crc32.Update(b.crc, castagnoli, p[:n])
	b.group = crc32.Update(b.group, castagnoli, p[:n])
	b.n += int64(n)
	return n, err
}

func (b *batchWriter) Seek(off int64, whence int) (int64, error) {
	if off != 0 || whence != io.SeekCurrent {
		return 0, errors.New("encode batch: the batch writer only reports its position")
	}
	return b.n, nil
}

// decodeBatch checks a batch file's checksum and decodes its records,
// which must have exactly the fields of want (pure). The caller releases
// the records.
func decodeBatch(path string, b []byte, crc uint32, want *arrow.Schema) (recs []arrow.Record, err error) {
	if got := crc32.Checksum(b, castagnoli); got != crc {
		return nil, &CorruptError{Path: path, Detail: fmt.Sprintf("CRC-32C is %08x, the manifest says %08x", got, crc)}
	}
	defer func() {
		if r := recover(); r != nil {
			for _, rec := range recs {
				rec.Release()
			}
			recs, err = nil, &CorruptError{Path: path, Detail: fmt.Sprint("arrow decode: ", r)}
		}
	}()
	r, err := ipc.NewFileReader(bytes.NewReader(b))
	if err != nil {
		return nil, &CorruptError{Path: path, Detail: err.Error()}
	}
	defer r.Close()
	if d := fieldsDiff(r.Schema().Fields(), want.Fields()); d != "" {
		return nil, &CorruptError{Path: path, Detail: "schema differs from the manifest: " + d}
	}
	for i := 0; i < r.NumRecords(); i++ {
		rec, err := r.RecordAt(i)
		if err != nil {
			for _, rec := range recs {
				rec.Release()
			}
			return nil, &CorruptError{Path: path, Detail: err.Error()}
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// fieldsDiff describes the first difference between two field lists
// (names, types, nullability and field metadata), or returns "".
func fieldsDiff(got, want []arrow.Field) string {
	for i := 0; i < min(len(got), len(want)); i++ {
		g, w := got[i], want[i]
		switch {
		case g.Name != w.Name:
			return fmt.Sprintf("column %d is %q in the batch but %q in the store", i, g.Name, w.Name)
		case !arrow.TypeEqual(g.Type, w.Type):
			return fmt.Sprintf("column %q is %s in the batch but %s in the store", g.Name, g.Type, w.Type)
		case g.Nullable != w.Nullable:
			return fmt.Sprintf("column %q is nullable=%t in the batch but nullable=%t in the store", g.Name, g.Nullable, w.Nullable)
		}
	}
	switch {
	case len(got) > len(want):
		return fmt.Sprintf("the batch has extra column %q (store columns: %s)", got[len(want)].Name, fieldNames(want))
	case len(got) < len(want):
		return fmt.Sprintf("the batch lacks column %q (store columns: %s)", want[len(got)].Name, fieldNames(want))
	}
	return ""
}

func fieldNames(fs []arrow.Field) string {
	var b bytes.Buffer
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", f.Name, f.Type)
	}
	return b.String()
}
