package pipe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// Writer writes a pipe: Arrow IPC streams back to back. It checks what it
// writes as strictly as the Reader checks what it reads. Each Write call
// flushes its bytes to the underlying writer before returning, so a reader
// on the other end of a Unix pipe sees every batch at once. A Writer is not
// safe for concurrent use. After a write error every call returns that
// error.
type Writer struct {
	out     *bufio.Writer
	mem     memory.Allocator
	cur     *ipc.Writer
	sum     checksummer // between cur and out: adds each batch's checksum
	header  Header
	schema  *arrow.Schema
	streams int // streams begun so far
	batch   int // batches written to the open stream
	err     error
}

// NewWriter returns a Writer on w. mem allocates Arrow buffers; nil means
// memory.DefaultAllocator.
func NewWriter(w io.Writer, mem memory.Allocator) *Writer {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &Writer{out: bufio.NewWriterSize(w, 64<<10), mem: mem}
}

// Streams returns how many streams the Writer has begun.
func (w *Writer) Streams() int { return w.streams }

// WriteRecord writes rec as a batch of a stream with header h. If a stream
// with the same header and the same columns is open, the batch is appended
// to it; otherwise the open stream is ended and a new one begun. rec's own
// schema metadata is kept except for the rtr.* keys, which come from h.
// Data records are checked: _time and _diff without nulls, _partition
// values valid for the domain. The caller keeps ownership of rec.
func (w *Writer) WriteRecord(h Header, rec arrow.Record) error {
	if w.err != nil {
		return w.err
	}
	if rec == nil {
		return errors.New("write record: nil record")
	}
	if err := h.check(); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	same := w.cur != nil && w.header.Equal(h) && w.schema.Equal(rec.Schema())
	if !same {
		if col, err := checkSchema(h, rec.Schema()); err != nil {
			return fmt.Errorf("write record: %w", &FormatError{Stream: w.streams, Batch: -1, Column: col, Offset: -1, Msg: "invalid schema", Err: err})
		}
	}
	if col, err := checkValues(h, rec); err != nil {
		idx, b := w.streams, 0
		if same {
			idx, b = w.streams-1, w.batch
		}
		return fmt.Errorf("write record: %w", &FormatError{Stream: idx, Batch: b, Column: col, Offset: -1, Msg: "invalid values", Err: err})
	}
	if !same {
		if err := w.endStream(); err != nil {
			return err
		}
		if err := w.begin(h, rec.Schema()); err != nil {
			return err
		}
	}
	return w.writeBatch(rec)
}

// begin starts a stream of header h with the columns of s.
func (w *Writer) begin(h Header, s *arrow.Schema) error {
	md := mergeMetadata(s.Metadata(), h.Metadata())
	md = arrow.NewMetadata(append(md.Keys(), MetaChecksum), append(md.Values(), ChecksumCRC32C))
	w.schema = arrow.NewSchema(s.Fields(), &md)
	w.header = h
	w.cur = ipc.NewWriter(&w.sum, ipc.WithSchema(w.schema), ipc.WithAllocator(w.mem))
	w.streams++
	w.batch = 0
	return nil
}

// writeBatch appends rec to the open stream and flushes it out.
func (w *Writer) writeBatch(rec arrow.Record) error {
	if err := w.cur.Write(rec); err != nil {
		w.err = fmt.Errorf("write record batch: %w", err)
		return w.err
	}
	w.batch++
	if err := w.sum.flush(w.out); err != nil {
		w.err = fmt.Errorf("write record batch: %w", err)
		return w.err
	}
	if err := w.out.Flush(); err != nil {
		w.err = fmt.Errorf("write record batch: %w", err)
		return w.err
	}
	return nil
}

// mergeMetadata keeps the keys of own outside the rtr. namespace and adds
// the header's keys.
func mergeMetadata(own, hdr arrow.Metadata) arrow.Metadata {
	keys := append([]string(nil), hdr.Keys()...)
	vals := append([]string(nil), hdr.Values()...)
	for i, k := range own.Keys() {
		if !strings.HasPrefix(k, "rtr.") {
			keys, vals = append(keys, k), append(vals, own.Values()[i])
		}
	}
	return arrow.NewMetadata(keys, vals)
}

// writeWhole writes one complete stream of one batch.
func (w *Writer) writeWhole(h Header, rec arrow.Record) error {
	if w.err != nil {
		return w.err
	}
	if err := h.check(); err != nil {
		return err
	}
	if col, err := checkSchema(h, rec.Schema()); err != nil {
		return &FormatError{Stream: w.streams, Batch: -1, Column: col, Offset: -1, Msg: "invalid schema", Err: err}
	}
	if err := w.endStream(); err != nil {
		return err
	}
	if err := w.begin(h, rec.Schema()); err != nil {
		return err
	}
	if err := w.writeBatch(rec); err != nil {
		return err
	}
	return w.endStream()
}

// WriteProgress writes a whole progress stream: the frontier f of a
// collection (or, with collection empty, of the whole source).
func (w *Writer) WriteProgress(collection, source string, f frontier.Frontier) error {
	h := Header{Kind: KindProgress, Collection: collection, Source: source, Domain: f.Domain()}
	if f.Domain() == "" {
		return errors.New("write progress: the frontier has no time domain: make it with frontier.New or frontier.Empty")
	}
	ps := f.Partitions()
	ups := make([]uint64, len(ps))
	for i, p := range ps {
		ups[i] = f.Get(p)
	}
	rec := w.buildRecord(reservedLayout(h), len(ps), func(b *array.RecordBuilder) {
		b.Field(0).(*array.StringBuilder).AppendValues(ps, nil)
		b.Field(1).(*array.Uint64Builder).AppendValues(ups, nil)
	})
	defer rec.Release()
	if err := w.writeWhole(h, rec); err != nil {
		return fmt.Errorf("write progress: %w", err)
	}
	return nil
}

// WriteBindings writes a whole bindings stream for source. bs must be
// non-empty, share one domain, have strictly ascending times and frontiers
// that only grow. A binding whose frontier is empty is written as one row
// with _partition "" and _upper 0.
func (w *Writer) WriteBindings(source string, bs []frontier.Binding) error {
	if len(bs) == 0 {
		return errors.New("write bindings: no bindings to write (a bindings stream needs at least one to carry its domain)")
	}
	d := bs[0].Frontier.Domain()
	if d == "" {
		return errors.New("write bindings: binding 0 has a frontier without a time domain: make it with frontier.New or frontier.Empty")
	}
	var times, ups []uint64
	var ps []string
	for i, b := range bs {
		if b.Frontier.Domain() != d {
			return fmt.Errorf("write bindings: binding %d is in domain %q, binding 0 in %q: %w", i, b.Frontier.Domain(), d, frontier.ErrDomainMismatch)
		}
		if i > 0 {
			if b.Time <= bs[i-1].Time {
				return fmt.Errorf("write bindings: binding %d at %d does not come after binding %d at %d: times must ascend strictly", i, b.Time, i-1, bs[i-1].Time)
			}
			if !b.Frontier.Covers(bs[i-1].Frontier) {
				return fmt.Errorf("write bindings: binding %d (%s) does not cover binding %d (%s): bindings only grow", i, b.Frontier, i-1, bs[i-1].Frontier)
			}
		}
		if b.Frontier.IsEmpty() {
			times, ps, ups = append(times, b.Time), append(ps, ""), append(ups, 0)
			continue
		}
		for _, p := range b.Frontier.Partitions() {
			times, ps, ups = append(times, b.Time), append(ps, p), append(ups, b.Frontier.Get(p))
		}
	}
	h := Header{Kind: KindBindings, Source: source, Domain: d}
	rec := w.buildRecord(reservedLayout(h), len(times), func(b *array.RecordBuilder) {
		b.Field(0).(*array.Uint64Builder).AppendValues(times, nil)
		b.Field(1).(*array.StringBuilder).AppendValues(ps, nil)
		b.Field(2).(*array.Uint64Builder).AppendValues(ups, nil)
	})
	defer rec.Release()
	if err := w.writeWhole(h, rec); err != nil {
		return fmt.Errorf("write bindings: %w", err)
	}
	return nil
}

// WriteError writes a whole error stream: collection has the definite
// error msg from time t (in domain d) on.
func (w *Writer) WriteError(collection string, d frontier.Domain, t uint64, msg string) error {
	h := Header{Kind: KindError, Collection: collection, Domain: d}
	rec := w.buildRecord(reservedLayout(h), 1, func(b *array.RecordBuilder) {
		b.Field(0).(*array.Uint64Builder).Append(t)
		b.Field(1).(*array.StringBuilder).Append(msg)
	})
	defer rec.Release()
	if err := w.writeWhole(h, rec); err != nil {
		return fmt.Errorf("write error stream: %w", err)
	}
	return nil
}

// WriteReset writes a whole reset stream: from time t (in domain d) on,
// collection holds only what follows in the pipe, in schema (the user
// columns; nil: unchanged).
func (w *Writer) WriteReset(collection string, d frontier.Domain, t uint64, schema *arrow.Schema) error {
	h := Header{Kind: KindReset, Collection: collection, Domain: d, Schema: schema}
	rec := w.buildRecord(reservedLayout(h), 1, func(b *array.RecordBuilder) {
		b.Field(0).(*array.Uint64Builder).Append(t)
	})
	defer rec.Release()
	if err := w.writeWhole(h, rec); err != nil {
		return fmt.Errorf("write reset stream: %w", err)
	}
	return nil
}

func (w *Writer) buildRecord(fields []arrow.Field, n int, fill func(*array.RecordBuilder)) arrow.Record {
	b := array.NewRecordBuilder(w.mem, arrow.NewSchema(fields, nil))
	defer b.Release()
	b.Reserve(n)
	fill(b)
	return b.NewRecord()
}

// endStream ends the open stream, if any, with the end-of-stream marker.
func (w *Writer) endStream() error {
	if w.cur == nil {
		return nil
	}
	err := w.cur.Close()
	w.cur, w.schema, w.header = nil, nil, Header{}
	if err == nil {
		err = w.sum.flush(w.out)
	}
	if err != nil {
		w.err = fmt.Errorf("end stream: %w", err)
		return w.err
	}
	if err := w.out.Flush(); err != nil {
		w.err = fmt.Errorf("end stream: %w", err)
		return w.err
	}
	return nil
}

// Flush ends the open stream (writes its end-of-stream marker) and flushes
// everything to the underlying writer. The next WriteRecord begins a new
// stream.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.endStream(); err != nil {
		return err
	}
	if err := w.out.Flush(); err != nil {
		w.err = fmt.Errorf("flush pipe: %w", err)
		return w.err
	}
	return nil
}

// Close flushes. It does not close the underlying writer.
func (w *Writer) Close() error { return w.Flush() }
