package pipe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"

	flatbuffers "github.com/google/flatbuffers/go"
)

// Per-batch checksums (docs/format-pipe.md, "Checksums"). A stream whose
// schema metadata has rtr.checksum = crc32c carries in every record batch
// message's custom_metadata the key rtr.crc32c: the CRC-32C (Castagnoli)
// of the message body, as 8 lowercase hex digits. Readers of older pipe
// versions and other Arrow implementations ignore both (custom metadata
// of a message is not part of the data), so the format stays version 1.

// Metadata keys of checksums.
const (
	// MetaChecksum is the schema metadata key that declares the stream's
	// batches checksummed; its one value is ChecksumCRC32C.
	MetaChecksum = "rtr.checksum"
	// ChecksumCRC32C is the value of MetaChecksum.
	ChecksumCRC32C = "crc32c"
	// MetaBatchCRC is the key of a record batch message's custom metadata
	// holding the CRC-32C of its body.
	MetaBatchCRC = "rtr.crc32c"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ChecksumError is a record batch whose body does not match its
// checksum, or that lacks one in a stream that declares them. It is the
// Err of a *FormatError that names the stream, batch and byte offset.
type ChecksumError struct {
	// Want is the checksum the batch carries ("" when it has none).
	Want string
	// Got is the CRC-32C of the body read.
	Got uint32
}

func (e *ChecksumError) Error() string {
	if e.Want == "" {
		return fmt.Sprintf("record batch has no %s checksum though its stream declares %s=%s (the writer or the bytes in between are broken)", MetaBatchCRC, MetaChecksum, ChecksumCRC32C)
	}
	return fmt.Sprintf("checksum mismatch: the batch says %s=%s, its body's CRC-32C is %08x (the bytes were corrupted on the way)", MetaBatchCRC, e.Want, e.Got)
}

// messageCRC returns the value of rtr.crc32c in a message's
// custom_metadata (slot 4 of Message), if any.
func messageCRC(msg fbTable) (string, bool, error) {
	start, n, _, err := msg.vectorField(4, 4)
	if err != nil {
		return "", false, err
	}
	for i := 0; i < n; i++ {
		kv, err := msg.tableAt(start + 4*i)
		if err != nil {
			return "", false, err
		}
		ks, kn, _, err := kv.vectorField(0, 1)
		if err != nil {
			return "", false, err
		}
		if string(kv.b[ks:ks+kn]) != MetaBatchCRC {
			continue
		}
		vs, vn, _, err := kv.vectorField(1, 1)
		if err != nil {
			return "", false, err
		}
		return string(kv.b[vs : vs+vn]), true, nil
	}
	return "", false, nil
}

// verifyCRC checks a record batch frame against its checksum; required
// says the stream declares checksums.
func verifyCRC(f frame, required bool) error {
	if !f.hasCRC && !required {
		return nil
	}
	got := crc32.Checksum(f.body, castagnoli)
	if f.hasCRC {
		if want, err := strconv.ParseUint(f.crc, 16, 32); err == nil && len(f.crc) == 8 && uint32(want) == got {
			return nil
		}
	}
	return &ChecksumError{Want: f.crc, Got: got}
}

// checksummer rewrites the encapsulated messages Arrow's IPC writer
// produces so that every record batch carries rtr.crc32c, and copies them
// to out. Arrow's writer has no way to set a message's custom metadata.
type checksummer struct {
	buf bytes.Buffer // what the IPC writer wrote since the last flush
	b   *flatbuffers.Builder
}

func (c *checksummer) Write(p []byte) (int, error) { return c.buf.Write(p) }

// flush copies the whole messages buffered to out, checksumming batches.
func (c *checksummer) flush(out io.Writer) error {
	data := c.buf.Bytes()
	for len(data) > 0 {
		if len(data) < 8 || binary.LittleEndian.Uint32(data) != continuation {
			return fmt.Errorf("checksum: unexpected IPC framing from the Arrow writer")
		}
		metaLen := int(binary.LittleEndian.Uint32(data[4:]))
		if metaLen == 0 { // end of stream
			if _, err := out.Write(data[:8]); err != nil {
				return err
			}
			data = data[8:]
			continue
		}
		meta := data[8 : 8+metaLen]
		msg, err := fbRoot(meta)
		if err != nil {
			return fmt.Errorf("checksum: %w", err)
		}
		typ, _ := msg.uint8Field(1)
		bodyLen, _ := msg.int64Field(3)
		body := data[8+metaLen : 8+metaLen+int(bodyLen)]
		prefix := data[:8]
		if typ == msgRecordBatch {
			if meta, err = c.withCRC(msg, crc32.Checksum(body, castagnoli)); err != nil {
				return err
			}
			var p [8]byte
			binary.LittleEndian.PutUint32(p[:], continuation)
			binary.LittleEndian.PutUint32(p[4:], uint32(len(meta)))
			prefix = p[:]
		}
		for _, part := range [][]byte{prefix, meta, body} {
			if _, err := out.Write(part); err != nil {
				return err
			}
		}
		data = data[8+metaLen+int(bodyLen):]
	}
	c.buf.Reset()
	return nil
}

// withCRC rebuilds a record batch Message with custom_metadata
// [rtr.crc32c = crc], padded to a multiple of 8 bytes. The RecordBatch
// header is copied field by field: length, nodes, buffers and
// variadicBufferCounts (compression is refused by the pipe format).
func (c *checksummer) withCRC(msg fbTable, crc uint32) ([]byte, error) {
	if c.b == nil {
		c.b = flatbuffers.NewBuilder(1024)
	}
	b := c.b
	b.Reset()
	version, _ := msg.int16Field(0)
	bodyLen, _ := msg.int64Field(3)
	rb, ok, err := msg.tableField(2)
	if err != nil || !ok {
		return nil, fmt.Errorf("checksum: record batch message without a header")
	}
	length, _ := rb.int64Field(0)
	structs := func(slot int) (flatbuffers.UOffsetT, bool, error) {
		start, n, ok, err := rb.vectorField(slot, 16)
		if err != nil || !ok {
			return 0, ok, err
		}
		b.StartVector(16, n, 8)
		for i := n - 1; i >= 0; i-- {
			p := start + 16*i
			b.Prep(8, 16)
			b.PlaceInt64(int64(binary.LittleEndian.Uint64(rb.b[p+8:])))
			b.PlaceInt64(int64(binary.LittleEndian.Uint64(rb.b[p:])))
		}
		return b.EndVector(n), true, nil
	}
	nodes, hasNodes, err := structs(1)
	if err != nil {
		return nil, err
	}
	buffers, hasBuffers, err := structs(2)
	if err != nil {
		return nil, err
	}
	var variadic flatbuffers.UOffsetT
	vs, vn, hasVariadic, err := rb.vectorField(4, 8)
	if err != nil {
		return nil, err
	}
	if hasVariadic {
		b.StartVector(8, vn, 8)
		for i := vn - 1; i >= 0; i-- {
			b.PrependInt64(int64(binary.LittleEndian.Uint64(rb.b[vs+8*i:])))
		}
		variadic = b.EndVector(vn)
	}
	b.StartObject(5) // RecordBatch
	b.PrependInt64Slot(0, length, 0)
	if hasNodes {
		b.PrependUOffsetTSlot(1, nodes, 0)
	}
	if hasBuffers {
		b.PrependUOffsetTSlot(2, buffers, 0)
	}
	if hasVariadic {
		b.PrependUOffsetTSlot(4, variadic, 0)
	}
	header := b.EndObject()

	key, val := b.CreateString(MetaBatchCRC), b.CreateString(fmt.Sprintf("%08x", crc))
	b.StartObject(2) // KeyValue
	b.PrependUOffsetTSlot(0, key, 0)
	b.PrependUOffsetTSlot(1, val, 0)
	kv := b.EndObject()
	b.StartVector(4, 1, 4)
	b.PrependUOffsetT(kv)
	custom := b.EndVector(1)

	b.StartObject(5) // Message
	b.PrependInt64Slot(3, bodyLen, 0)
	b.PrependUOffsetTSlot(2, header, 0)
	b.PrependUOffsetTSlot(4, custom, 0)
	b.PrependInt16Slot(0, version, 0)
	b.PrependByteSlot(1, msgRecordBatch, 0)
	b.Finish(b.EndObject())
	out := b.FinishedBytes()
	padded := make([]byte, (len(out)+7)&^7)
	copy(padded, out)
	return padded, nil
}
