package pipe

import (
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// Reader reads a pipe stream by stream. It is a pure function of the bytes
// of its io.Reader: it reads each message exactly (never beyond the
// end-of-stream marker of the stream it is in), copes with short reads, and
// checks everything it returns. A Reader is not safe for concurrent use.
// After an error, every call returns that error.
type Reader struct {
	fr  framer
	mem memory.Allocator
	cur *Stream
	n   int
	err error
}

// NewReader returns a Reader on r. mem allocates Arrow buffers; nil means
// memory.DefaultAllocator.
func NewReader(r io.Reader, mem memory.Allocator) *Reader {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &Reader{fr: framer{r: r}, mem: mem}
}

// Stream is one stream of a pipe. Its records are read with NextRecord or,
// for progress, bindings and error streams, decoded whole with
// ReadProgress, ReadBindings or ReadError.
type Stream struct {
	// Header is what the stream's schema metadata says.
	Header Header
	// Schema is the stream's schema, metadata included.
	Schema *arrow.Schema
	// Index is the stream's 0-based position in the pipe.
	Index int

	r     *Reader
	ar    *ipc.Reader
	mr    *msgReader
	batch int  // batches returned so far
	done  bool // end-of-stream marker seen
	// checksummed: the schema declares rtr.checksum = crc32c, so every
	// batch must carry a matching rtr.crc32c.
	checksummed bool
}

// Next returns the next stream, or io.EOF when the input ends cleanly (at
// byte 0 or right after an end-of-stream marker). Whatever is left of the
// previous stream is read and dropped first; records it returned stay
// valid. Any other problem is a *FormatError.
func (r *Reader) Next() (*Stream, error) {
	if r.err != nil {
		return nil, r.err
	}
	if s := r.cur; s != nil {
		if err := s.drain(); err != nil {
			return nil, err
		}
		r.cur = nil
	}
	fr, err := r.fr.next(true)
	if err == io.EOF {
		r.err = io.EOF
		return nil, io.EOF
	}
	if err != nil {
		return nil, r.fail(r.n, -1, "", "", err)
	}
	if fr.eos {
		return nil, r.fail(r.n, -1, "", "", &frameError{offset: fr.offset, msg: "stream has no schema: an end-of-stream marker came where a schema message belongs"})
	}
	if fr.typ != msgSchema {
		return nil, r.fail(r.n, -1, "", "", &frameError{offset: fr.offset, msg: "stream does not begin with a schema message"})
	}
	s := &Stream{Index: r.n, r: r}
	s.mr = &msgReader{s: s, pending: &fr}
	s.ar, err = newIPCReader(s.mr, r.mem)
	if err != nil {
		return nil, r.fail(s.Index, -1, "", "decode schema", err)
	}
	s.Schema = s.ar.Schema()
	s.Header, err = ParseHeader(s.Schema.Metadata())
	if err != nil {
		s.release()
		return nil, r.fail(s.Index, -1, "", "invalid schema metadata", err)
	}
	switch v, ok := s.Schema.Metadata().GetValue(MetaChecksum); {
	case !ok:
	case v == ChecksumCRC32C:
		s.checksummed = true
	default:
		s.release()
		return nil, r.fail(s.Index, -1, "", "invalid schema metadata", fmt.Errorf("%s %q is not %s", MetaChecksum, v, ChecksumCRC32C))
	}
	if col, err := checkSchema(s.Header, s.Schema); err != nil {
		s.release()
		return nil, r.fail(s.Index, -1, col, "invalid schema", err)
	}
	r.n++
	r.cur = s
	return s, nil
}

// newIPCReader wraps ipc.NewReaderFromMessageReader so that a panic on
// corrupt input becomes an error.
func newIPCReader(mr *msgReader, mem memory.Allocator) (ar *ipc.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			ar, err = nil, fmt.Errorf("arrow: %v", p)
		}
	}()
	return ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(mem))
}

// fail records a sticky FormatError. A frameError's offset is carried
// over; a FormatError is kept as it is.
func (r *Reader) fail(stream, batch int, col, msg string, err error) error {
	if r.cur != nil {
		r.cur.release()
	}
	var fe *FormatError
	if errors.As(err, &fe) {
		r.err = fe
		return fe
	}
	e := &FormatError{Stream: stream, Batch: batch, Column: col, Offset: -1, Msg: msg, Err: err}
	var fre *frameError
	if errors.As(err, &fre) {
		e.Offset = fre.offset
		if msg == "" {
			e.Msg, e.Err = fre.msg, fre.err
		}
	}
	r.err = e
	return e
}

// Close releases what the Reader holds of the stream it is in. It does
// not close the underlying io.Reader. Records already returned stay valid.
func (r *Reader) Close() error {
	if r.cur != nil {
		r.cur.release()
		r.cur = nil
	}
	if r.err == nil {
		r.err = errors.New("pipe: reader is closed")
	}
	return nil
}

// NextRecord returns the stream's next record batch, or io.EOF at the end
// of the stream. The caller owns the record and must Release it. Records
// are checked: reserved columns without nulls, _partition values valid for
// the domain, and every user column's buffers consistent, so that reading
// any value of a returned record cannot panic.
func (s *Stream) NextRecord() (arrow.Record, error) {
	if s.r.err != nil {
		return nil, s.r.err
	}
	if s.done || s.r.cur != s {
		return nil, io.EOF
	}
	rec, err := s.read()
	if err == io.EOF {
		s.done = true
		s.release()
		return nil, io.EOF
	}
	if err != nil {
		return nil, s.r.fail(s.Index, s.batch, "", "decode record batch", err)
	}
	if col, err := checkRecord(s.Header, rec); err != nil {
		rec.Release()
		return nil, s.r.fail(s.Index, s.batch, col, "invalid values", err)
	}
	s.batch++
	return rec, nil
}

// read reads one record through Arrow, retained for the caller.
func (s *Stream) read() (rec arrow.Record, err error) {
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, fmt.Errorf("arrow: %v", p)
		}
	}()
	rec, err = s.ar.Read()
	if err != nil {
		return nil, err
	}
	rec.Retain()
	return rec, nil
}

// drain reads what is left of the stream without decoding it.
func (s *Stream) drain() error {
	for !s.done {
		fr, err := s.mr.frame()
		if err != nil {
			return s.r.fail(s.Index, s.batch, "", "", err)
		}
		if fr.eos {
			s.done = true
			break
		}
		s.batch++
	}
	s.release()
	return nil
}

func (s *Stream) release() {
	if s.ar != nil {
		s.ar.Release()
		s.ar = nil
	}
}

// msgReader feeds one stream's messages to Arrow's reader: the schema
// message read by Reader.Next, then record batches until the end-of-stream
// marker, which it reports as io.EOF.
type msgReader struct {
	s       *Stream
	pending *frame
	msg     *ipc.Message
}

// frame returns the next framed message of the stream.
func (m *msgReader) frame() (frame, error) {
	if m.pending != nil {
		f := *m.pending
		m.pending = nil
		return f, nil
	}
	f, err := m.s.r.fr.next(false)
	if err != nil {
		return frame{}, err
	}
	if !f.eos && f.typ != msgRecordBatch {
		return frame{}, &frameError{offset: f.offset, msg: "a stream may hold only one schema message: a schema message came where a record batch or end-of-stream marker belongs (is an end-of-stream marker missing between two streams?)"}
	}
	if !f.eos {
		if err := verifyCRC(f, m.s.checksummed); err != nil {
			return frame{}, &frameError{offset: f.offset, msg: "record batch", err: err}
		}
	}
	return f, nil
}

// Message implements ipc.MessageReader.
func (m *msgReader) Message() (*ipc.Message, error) {
	f, err := m.frame()
	if err != nil {
		return nil, &FormatError{Stream: m.s.Index, Batch: m.s.batch, Offset: offsetOf(err), Msg: msgOf(err), Err: causeOf(err)}
	}
	if f.eos {
		m.s.done = true
		return nil, io.EOF
	}
	if m.msg != nil {
		m.msg.Release()
	}
	m.msg = ipc.NewMessage(memory.NewBufferBytes(f.meta), memory.NewBufferBytes(f.body))
	return m.msg, nil
}

func offsetOf(err error) int64 {
	var fe *frameError
	if errors.As(err, &fe) {
		return fe.offset
	}
	return -1
}

func msgOf(err error) string {
	var fe *frameError
	if errors.As(err, &fe) {
		return fe.msg
	}
	return "read message"
}

func causeOf(err error) error {
	var fe *frameError
	if errors.As(err, &fe) {
		return fe.err
	}
	return err
}

// Retain implements ipc.MessageReader.
func (m *msgReader) Retain() {}

// Release implements ipc.MessageReader.
func (m *msgReader) Release() {
	if m.msg != nil {
		m.msg.Release()
		m.msg = nil
	}
}

// checkRecord checks the values of a record of a stream with header h
// (whose schema has passed checkSchema). It returns the column at fault.
func checkRecord(h Header, rec arrow.Record) (string, error) {
	s := rec.Schema()
	nRes := len(reservedLayout(h))
	for i := 0; i < int(rec.NumCols())-nRes; i++ {
		if err := checkArray(rec.Column(i).Data(), 0); err != nil {
			return s.Field(i).Name, err
		}
		if int64(rec.Column(i).Len()) != rec.NumRows() {
			return s.Field(i).Name, fmt.Errorf("column has %d rows, the batch %d", rec.Column(i).Len(), rec.NumRows())
		}
	}
	for i := int(rec.NumCols()) - nRes; i < int(rec.NumCols()); i++ {
		if err := checkArray(rec.Column(i).Data(), 0); err != nil {
			return s.Field(i).Name, err
		}
	}
	return checkValues(h, rec)
}

// checkValues checks the reserved columns of rec: no nulls, and for data
// streams _partition values valid for the domain.
func checkValues(h Header, rec arrow.Record) (string, error) {
	s := rec.Schema()
	n := int(rec.NumCols())
	res := reservedLayout(h)
	if n < len(res) {
		return "", fmt.Errorf("record has %d columns, fewer than the %d reserved ones", n, len(res))
	}
	for j, f := range res {
		col := rec.Column(n - len(res) + j)
		if s.Field(n-len(res)+j).Name != f.Name {
			return f.Name, errors.New("column is missing or out of place")
		}
		if int64(col.Len()) != rec.NumRows() {
			return f.Name, fmt.Errorf("column has %d rows, the batch %d", col.Len(), rec.NumRows())
		}
		if col.NullN() != 0 {
			return f.Name, fmt.Errorf("column has %d nulls: reserved columns must have none", col.NullN())
		}
		if h.Kind == KindData && f.Name == ColPartition {
			parts, ok := col.(*array.String)
			if !ok {
				return f.Name, fmt.Errorf("column has type %s, want utf8", col.DataType())
			}
			last := ""
			for i := 0; i < parts.Len(); i++ {
				p := parts.Value(i)
				if i > 0 && p == last {
					continue
				}
				if _, err := frontier.New(h.Domain, map[string]uint64{p: 1}); err != nil {
					return f.Name, fmt.Errorf("row %d: %w", i, err)
				}
				last = p
			}
		}
	}
	return "", nil
}
