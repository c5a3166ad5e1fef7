package pipe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// This file frames Arrow IPC messages itself rather than through
// ipc.NewMessageReader. Arrow's reader does not read ahead (it reads exactly
// prefix, metadata and body), but it allocates whatever lengths the input
// claims before reading them, and it trusts the buffer offsets in a record
// batch. A pipe reader must survive any input, so the framer here reads the
// flatbuffer metadata with bounds checks first, refuses lengths and offsets
// that cannot be right, and grows buffers only as bytes actually arrive.

// Arrow IPC message header types (flatbuf MessageHeader).
const (
	msgSchema          = 1
	msgDictionaryBatch = 2
	msgRecordBatch     = 3
)

// Arrow metadata versions this reader accepts (flatbuf MetadataVersion):
// V4 (3) and V5 (4).
const (
	metadataV4 = 3
	metadataV5 = 4
)

// maxMetaLen bounds a message's flatbuffer metadata. A schema of thousands
// of columns needs well under a megabyte.
const maxMetaLen = 16 << 20

// continuation is the marker in front of every encapsulated message.
const continuation = 0xFFFFFFFF

// errTruncated marks input that ended inside a stream.
var errTruncated = errors.New("truncated: the input ended in the middle of a stream (was the writer killed?)")

// frame is one framed message.
type frame struct {
	eos    bool   // the end-of-stream marker
	offset int64  // byte offset of the message in the input
	typ    byte   // msgSchema, msgRecordBatch, ...
	meta   []byte // flatbuffer Message
	body   []byte
	crc    string // a record batch's rtr.crc32c, when hasCRC
	hasCRC bool
}

// framer reads encapsulated IPC messages from r, never more bytes than the
// message it is reading.
type framer struct {
	r   io.Reader
	off int64
	buf [8]byte
}

// frameError is a framing problem; the reader adds stream and batch.
type frameError struct {
	offset int64
	msg    string
	err    error
}

func (e *frameError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *frameError) Unwrap() error { return e.err }

// next reads one message. At a stream boundary (atBoundary) a clean EOF
// before the first byte returns io.EOF; every other short input is
// errTruncated.
func (f *framer) next(atBoundary bool) (frame, error) {
	start := f.off
	n, err := io.ReadFull(f.r, f.buf[:4])
	f.off += int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) && n == 0 && atBoundary {
			return frame{}, io.EOF
		}
		return frame{}, f.readErr(start, "read continuation marker", err)
	}
	if binary.LittleEndian.Uint32(f.buf[:4]) != continuation {
		what := "a message"
		if atBoundary {
			what = "the next stream"
		}
		return frame{}, &frameError{offset: start, msg: fmt.Sprintf("garbage: expected the continuation marker FFFFFFFF in front of %s, got %X", what, f.buf[:4])}
	}
	n, err = io.ReadFull(f.r, f.buf[4:8])
	f.off += int64(n)
	if err != nil {
		return frame{}, f.readErr(start, "read message length", err)
	}
	metaLen := int32(binary.LittleEndian.Uint32(f.buf[4:8]))
	if metaLen == 0 {
		return frame{eos: true, offset: start}, nil
	}
	if metaLen < 0 || metaLen > maxMetaLen {
		return frame{}, &frameError{offset: start, msg: fmt.Sprintf("garbage: message metadata length %d is out of range (1..%d)", metaLen, maxMetaLen)}
	}
	meta := make([]byte, metaLen)
	n, err = io.ReadFull(f.r, meta)
	f.off += int64(n)
	if err != nil {
		return frame{}, f.readErr(start, "read message metadata", err)
	}
	fr := frame{offset: start, meta: meta}
	msg, err := fbRoot(meta)
	if err != nil {
		return frame{}, &frameError{offset: start, msg: "garbage: message metadata is not a flatbuffer Message", err: err}
	}
	version, err := msg.int16Field(0)
	if err != nil {
		return frame{}, &frameError{offset: start, msg: "garbage: message metadata", err: err}
	}
	if version != metadataV4 && version != metadataV5 {
		return frame{}, &frameError{offset: start, msg: fmt.Sprintf("unsupported Arrow metadata version %d (want V4 or V5)", int(version)+1)}
	}
	fr.typ, err = msg.uint8Field(1)
	if err != nil {
		return frame{}, &frameError{offset: start, msg: "garbage: message metadata", err: err}
	}
	bodyLen, err := msg.int64Field(3)
	if err != nil {
		return frame{}, &frameError{offset: start, msg: "garbage: message metadata", err: err}
	}
	if bodyLen < 0 {
		return frame{}, &frameError{offset: start, msg: fmt.Sprintf("garbage: negative message body length %d", bodyLen)}
	}
	hdr, ok, err := msg.tableField(2)
	if err != nil || !ok {
		if err == nil {
			err = errors.New("no header")
		}
		return frame{}, &frameError{offset: start, msg: "garbage: message metadata", err: err}
	}
	switch fr.typ {
	case msgSchema:
		if bodyLen != 0 {
			return frame{}, &frameError{offset: start, msg: fmt.Sprintf("garbage: schema message with a %d-byte body", bodyLen)}
		}
		if err := checkSchemaFB(hdr); err != nil {
			return frame{}, &frameError{offset: start, msg: "garbage: schema message", err: err}
		}
	case msgRecordBatch:
		if err := checkRecordBatchFB(hdr, bodyLen); err != nil {
			return frame{}, &frameError{offset: start, msg: "record batch message", err: err}
		}
		if fr.crc, fr.hasCRC, err = messageCRC(msg); err != nil {
			return frame{}, &frameError{offset: start, msg: "garbage: record batch custom metadata", err: err}
		}
	case msgDictionaryBatch:
		return frame{}, &frameError{offset: start, msg: fmt.Sprintf("dictionary batches are not allowed in pipe version %s: write plain (non-dictionary) columns", Version)}
	default:
		return frame{}, &frameError{offset: start, msg: fmt.Sprintf("unsupported Arrow message type %d (a pipe has schema and record batch messages only)", fr.typ)}
	}
	fr.body, err = f.readBody(bodyLen)
	if err != nil {
		return frame{}, f.readErr(start, "read message body", err)
	}
	return fr, nil
}

func (f *framer) readErr(start int64, op string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &frameError{offset: start, msg: op, err: errTruncated}
	}
	return &frameError{offset: start, msg: op, err: err}
}

// readBody reads exactly n bytes, growing the buffer only as data arrives
// so that a lying length on short input costs no more memory than the
// input itself.
func (f *framer) readBody(n int64) ([]byte, error) {
	const chunk = 4 << 20
	if n <= chunk {
		b := make([]byte, n)
		m, err := io.ReadFull(f.r, b)
		f.off += int64(m)
		return b, err
	}
	b := make([]byte, 0, chunk)
	for int64(len(b)) < n {
		if len(b) == cap(b) {
			c := min(int64(cap(b))*2, n)
			nb := make([]byte, len(b), c)
			copy(nb, b)
			b = nb
		}
		want := min(int64(cap(b)), n)
		m, err := io.ReadFull(f.r, b[len(b):want])
		f.off += int64(m)
		b = b[:len(b)+m]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// checkRecordBatchFB checks a RecordBatch table: non-negative lengths, no
// compression, and every buffer inside the body.
func checkRecordBatchFB(rb fbTable, bodyLen int64) error {
	length, err := rb.int64Field(0)
	if err != nil {
		return err
	}
	if length < 0 {
		return fmt.Errorf("negative row count %d", length)
	}
	if _, ok, err := rb.tableField(3); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("body compression is not allowed in pipe version %s: write uncompressed batches", Version)
	}
	start, n, _, err := rb.vectorField(1, 16) // nodes: struct FieldNode {length, null_count int64}
	if err != nil {
		return fmt.Errorf("field nodes: %w", err)
	}
	for i := 0; i < n; i++ {
		p := start + 16*i
		l := int64(binary.LittleEndian.Uint64(rb.b[p:]))
		nulls := int64(binary.LittleEndian.Uint64(rb.b[p+8:]))
		if l < 0 || nulls < 0 || nulls > l {
			return fmt.Errorf("field node %d: length %d, null count %d out of range", i, l, nulls)
		}
	}
	start, n, _, err = rb.vectorField(2, 16) // buffers: struct Buffer {offset, length int64}
	if err != nil {
		return fmt.Errorf("buffers: %w", err)
	}
	for i := 0; i < n; i++ {
		p := start + 16*i
		off := int64(binary.LittleEndian.Uint64(rb.b[p:]))
		l := int64(binary.LittleEndian.Uint64(rb.b[p+8:]))
		if off < 0 || l < 0 || off > bodyLen || l > bodyLen-off {
			return fmt.Errorf("buffer %d: offset %d, length %d lie outside the %d-byte body", i, off, l, bodyLen)
		}
	}
	return nil
}

// checkSchemaFB walks a Schema table and checks that every vector and
// string lies inside the metadata, so that decoding it allocates no more
// than the metadata's size suggests.
func checkSchemaFB(s fbTable) error {
	if _, _, _, err := s.vectorField(1, 4); err != nil {
		return fmt.Errorf("fields: %w", err)
	}
	if err := checkFieldsFB(s, 1, 0); err != nil {
		return err
	}
	if err := checkKeyValuesFB(s, 2); err != nil {
		return fmt.Errorf("schema metadata: %w", err)
	}
	if _, _, _, err := s.vectorField(3, 8); err != nil {
		return fmt.Errorf("features: %w", err)
	}
	return nil
}

// checkFieldsFB checks the vector of Field tables at slot of t.
func checkFieldsFB(t fbTable, slot, depth int) error {
	if depth > maxNesting+1 {
		return fmt.Errorf("fields nested more than %d deep", maxNesting)
	}
	start, n, _, err := t.vectorField(slot, 4)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		f, err := t.tableAt(start + 4*i)
		if err != nil {
			return fmt.Errorf("field %d: %w", i, err)
		}
		if _, _, _, err := f.vectorField(0, 1); err != nil { // name
			return fmt.Errorf("field %d name: %w", i, err)
		}
		if _, _, err := f.tableField(3); err != nil { // type
			return fmt.Errorf("field %d type: %w", i, err)
		}
		if _, ok, err := f.tableField(4); err != nil {
			return fmt.Errorf("field %d dictionary: %w", i, err)
		} else if ok {
			return fmt.Errorf("field %d is dictionary-encoded, which pipe version %s does not allow", i, Version)
		}
		if err := checkFieldsFB(f, 5, depth+1); err != nil { // children
			return fmt.Errorf("field %d children: %w", i, err)
		}
		if err := checkKeyValuesFB(f, 6); err != nil {
			return fmt.Errorf("field %d metadata: %w", i, err)
		}
	}
	return nil
}

func checkKeyValuesFB(t fbTable, slot int) error {
	start, n, _, err := t.vectorField(slot, 4)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		kv, err := t.tableAt(start + 4*i)
		if err != nil {
			return err
		}
		if _, _, _, err := kv.vectorField(0, 1); err != nil {
			return err
		}
		if _, _, _, err := kv.vectorField(1, 1); err != nil {
			return err
		}
	}
	return nil
}

// fbTable is a flatbuffer table at pos in b, read with bounds checks.
type fbTable struct {
	b   []byte
	pos int
}

var errFBBounds = errors.New("flatbuffer offset out of bounds")

func fbRoot(b []byte) (fbTable, error) {
	if len(b) < 4 {
		return fbTable{}, errFBBounds
	}
	return fbTable{b: b}.tableAt(0)
}

// tableAt follows the uoffset stored at p to a table and checks its vtable.
func (t fbTable) tableAt(p int) (fbTable, error) {
	if p < 0 || p > len(t.b)-4 {
		return fbTable{}, errFBBounds
	}
	pos := int64(p) + int64(binary.LittleEndian.Uint32(t.b[p:]))
	if pos > int64(len(t.b)-4) {
		return fbTable{}, errFBBounds
	}
	nt := fbTable{b: t.b, pos: int(pos)}
	if _, _, err := nt.vtable(); err != nil {
		return fbTable{}, err
	}
	return nt, nil
}

func (t fbTable) vtable() (vt, size int, err error) {
	soff := int64(int32(binary.LittleEndian.Uint32(t.b[t.pos:])))
	v := int64(t.pos) - soff
	if v < 0 || v > int64(len(t.b)-4) {
		return 0, 0, errFBBounds
	}
	sz := int(binary.LittleEndian.Uint16(t.b[v:]))
	if sz < 4 || sz%2 != 0 || int(v)+sz > len(t.b) {
		return 0, 0, errFBBounds
	}
	return int(v), sz, nil
}

// field returns the absolute position of field slot and whether it is
// present, checking that size bytes fit there.
func (t fbTable) field(slot, size int) (int, bool, error) {
	vt, sz, err := t.vtable()
	if err != nil {
		return 0, false, err
	}
	e := 4 + 2*slot
	if e+2 > sz {
		return 0, false, nil
	}
	o := int(binary.LittleEndian.Uint16(t.b[vt+e:]))
	if o == 0 {
		return 0, false, nil
	}
	p := t.pos + o
	if p+size > len(t.b) {
		return 0, false, errFBBounds
	}
	return p, true, nil
}

func (t fbTable) int64Field(slot int) (int64, error) {
	p, ok, err := t.field(slot, 8)
	if err != nil || !ok {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(t.b[p:])), nil
}

func (t fbTable) int16Field(slot int) (int16, error) {
	p, ok, err := t.field(slot, 2)
	if err != nil || !ok {
		return 0, err
	}
	return int16(binary.LittleEndian.Uint16(t.b[p:])), nil
}

func (t fbTable) uint8Field(slot int) (byte, error) {
	p, ok, err := t.field(slot, 1)
	if err != nil || !ok {
		return 0, err
	}
	return t.b[p], nil
}

func (t fbTable) tableField(slot int) (fbTable, bool, error) {
	p, ok, err := t.field(slot, 4)
	if err != nil || !ok {
		return fbTable{}, false, err
	}
	nt, err := t.tableAt(p)
	return nt, err == nil, err
}

// vectorField returns the start and length of the vector at slot, checking
// that n elements of elemSize bytes fit in the buffer.
func (t fbTable) vectorField(slot, elemSize int) (start, n int, ok bool, err error) {
	p, ok, err := t.field(slot, 4)
	if err != nil || !ok {
		return 0, 0, false, err
	}
	v := int64(p) + int64(binary.LittleEndian.Uint32(t.b[p:]))
	if v > int64(len(t.b)-4) {
		return 0, 0, false, errFBBounds
	}
	cnt := int64(binary.LittleEndian.Uint32(t.b[v:]))
	s := v + 4
	if cnt*int64(elemSize) > int64(len(t.b))-s {
		return 0, 0, false, errFBBounds
	}
	return int(s), int(cnt), true, nil
}
