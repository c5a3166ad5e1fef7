package pipe

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"
)

// batchBodies returns the byte ranges [start, end) of the record batch
// bodies in a pipe, in order.
func batchBodies(t testing.TB, p []byte) [][2]int {
	t.Helper()
	f := framer{r: bytes.NewReader(p)}
	var out [][2]int
	for {
		fr, err := f.next(true)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fr.eos && fr.typ == msgRecordBatch && len(fr.body) > 0 {
			out = append(out, [2]int{int(f.off) - len(fr.body), int(f.off)})
		}
	}
}

// readPipe reads every record of every stream of p and returns the
// error that stopped it (nil at a clean end).
func readPipe(p []byte) error {
	return readAll(NewReader(bytes.NewReader(p), memory.NewGoAllocator()), "")
}

// TestChecksumFlippedByte: every byte of every batch body flipped is a
// *ChecksumError in a *FormatError naming the stream and batch, where
// without checksums most flips would pass unnoticed as other values.
func TestChecksumFlippedByte(t *testing.T) {
	p := samplePipe(t)
	if err := readPipe(p); err != nil {
		t.Fatal(err)
	}
	bodies := batchBodies(t, p)
	if len(bodies) < 3 {
		t.Fatalf("sample pipe has %d batch bodies", len(bodies))
	}
	for bi, b := range bodies {
		for i := b[0]; i < b[1]; i++ {
			bad := bytes.Clone(p)
			bad[i] ^= 0x10
			err := readPipe(bad)
			var fe *FormatError
			var ce *ChecksumError
			if !errors.As(err, &fe) || !errors.As(err, &ce) {
				t.Fatalf("body %d byte %d flipped: %v, want a checksum error", bi, i, err)
			}
			if fe.Batch < 0 || fe.Offset < 0 || ce.Want == "" || !strings.Contains(err.Error(), "checksum mismatch") {
				t.Fatalf("body %d byte %d flipped: %v (%+v) does not name the batch", bi, i, err, fe)
			}
		}
	}
	// The first data batch of the sample: stream 0, batch 0.
	bad := bytes.Clone(p)
	bad[bodies[0][0]] ^= 1
	err := readPipe(bad)
	if want := "pipe: stream 0, batch 0"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not start %q", err, want)
	}
}

// TestChecksumDeclaredButMissing: a stream that declares checksums but
// whose batch has none is refused; a stream that declares none (Arrow JS,
// older writers) is read without; a wrong checksum is refused either way.
func TestChecksumDeclaredButMissing(t *testing.T) {
	data := []col{{fld("id", i64), b1(1, 2)}, {fld("_time", u64), b1(5, 5)}, {fld("_diff", i64), b1(1, -1)}}
	plain := raw(t, meta("data", "lsn"), data)
	if err := readPipe(plain); err != nil {
		t.Fatalf("a stream without checksums: %v", err)
	}
	declared := raw(t, meta("data", "lsn", MetaChecksum, ChecksumCRC32C), data)
	err := readPipe(declared)
	var ce *ChecksumError
	if !errors.As(err, &ce) || ce.Want != "" || !strings.Contains(err.Error(), "has no rtr.crc32c checksum") {
		t.Errorf("declared but missing: %v", err)
	}
	if err := readPipe(raw(t, meta("data", "lsn", MetaChecksum, "md5"), data)); err == nil || !strings.Contains(err.Error(), `rtr.checksum "md5" is not crc32c`) {
		t.Errorf("unknown checksum kind: %v", err)
	}
	// Batches with checksums in a stream that declares none are still
	// verified.
	var c checksummer
	c.buf.Write(plain)
	var summed bytes.Buffer
	if err := c.flush(&summed); err != nil {
		t.Fatal(err)
	}
	if err := readPipe(summed.Bytes()); err != nil {
		t.Fatalf("checksummed batches, undeclared: %v", err)
	}
	body := batchBodies(t, summed.Bytes())[0]
	bad := bytes.Clone(summed.Bytes())
	bad[body[0]] ^= 1
	if err := readPipe(bad); !errors.As(err, &ce) || ce.Want == "" {
		t.Errorf("flipped byte in a checksummed batch of an undeclared stream: %v", err)
	}
}

// TestChecksumFormat: the checksum is 8 lowercase hex digits of CRC-32C
// over the body, in the batch message's custom_metadata, as the docs say.
func TestChecksumFormat(t *testing.T) {
	p := samplePipe(t)
	f := framer{r: bytes.NewReader(p)}
	n := 0
	for {
		fr, err := f.next(true)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if fr.eos || fr.typ != msgRecordBatch {
			continue
		}
		n++
		want := fmt.Sprintf("%08x", crc32.Checksum(fr.body, crc32.MakeTable(crc32.Castagnoli)))
		if !fr.hasCRC || fr.crc != want {
			t.Errorf("batch at %d: rtr.crc32c %q (present %v), want %s", fr.offset, fr.crc, fr.hasCRC, want)
		}
		if len(fr.meta)%8 != 0 {
			t.Errorf("batch at %d: metadata of %d bytes is not padded to 8", fr.offset, len(fr.meta))
		}
	}
	if n == 0 {
		t.Fatal("no batches")
	}
}

// FuzzChecksumFlip flips one byte anywhere in a batch body of a valid
// pipe: the read must fail with a checksum error.
func FuzzChecksumFlip(f *testing.F) {
	p := samplePipe(f)
	bodies := batchBodies(f, p)
	f.Add(uint16(0), uint16(0), byte(1))
	f.Add(uint16(2), uint16(9), byte(0x80))
	f.Fuzz(func(t *testing.T, which, at uint16, mask byte) {
		if mask == 0 {
			return
		}
		b := bodies[int(which)%len(bodies)]
		bad := bytes.Clone(p)
		bad[b[0]+int(at)%(b[1]-b[0])] ^= mask
		var ce *ChecksumError
		if err := readPipe(bad); !errors.As(err, &ce) {
			t.Fatalf("flipped body byte: %v, want a checksum error", err)
		}
	})
}
