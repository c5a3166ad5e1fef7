package pipe

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/apache/arrow/go/v17/arrow/memory"
)

// digest reads a whole pipe and describes everything it returned, down to
// every value, ending with the error that stopped it. Reading every value
// proves that returned records are safe to use.
func digest(r *Reader) string {
	var b strings.Builder
	defer r.Close()
	for {
		s, err := r.Next()
		if err != nil {
			fmt.Fprintf(&b, "end: %v\n", err)
			return b.String()
		}
		fmt.Fprintf(&b, "stream %d %+v %d cols\n", s.Index, s.Header, s.Schema.NumFields())
		switch s.Header.Kind {
		case KindProgress:
			f, err := s.ReadProgress()
			fmt.Fprintf(&b, "progress %q %v\n", f, err)
		case KindBindings:
			bs, err := s.ReadBindings()
			for _, x := range bs {
				fmt.Fprintf(&b, "binding %d %q\n", x.Time, x.Frontier)
			}
			fmt.Fprintf(&b, "bindings %v\n", err)
		case KindError:
			t, msg, err := s.ReadError()
			fmt.Fprintf(&b, "error %d %q %v\n", t, msg, err)
		default:
			for {
				rec, err := s.NextRecord()
				if err != nil {
					fmt.Fprintf(&b, "records end: %v\n", err)
					break
				}
				for c := 0; c < int(rec.NumCols()); c++ {
					a := rec.Column(c)
					for i := 0; i < a.Len(); i++ {
						b.WriteString(a.ValueStr(i))
						b.WriteByte(' ')
					}
					b.WriteByte('\n')
				}
				if cols, times, diffs, _ := SplitData(rec); times == nil || diffs == nil || len(cols) != int(rec.NumCols())-2-boolInt(s.Header.Domain.Partitioned()) {
					fmt.Fprintf(&b, "SplitData failed on a valid record\n")
				}
				rec.Release()
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzReader feeds arbitrary bytes to the Reader. It must never panic, and
// it must return the same things whether the bytes arrive whole or one at
// a time.
func FuzzReader(f *testing.F) {
	valid := samplePipe(f)
	f.Add([]byte{})
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), "garbage"...))
	f.Add(validData(f))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0})
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 8, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		whole := digest(NewReader(bytes.NewReader(data), memory.NewGoAllocator()))
		bytewise := digest(NewReader(iotest.OneByteReader(bytes.NewReader(data)), memory.NewGoAllocator()))
		if whole != bytewise {
			t.Fatalf("whole and byte-wise reads differ:\n%s\n---\n%s", whole, bytewise)
		}
		if strings.Contains(whole, "SplitData failed") {
			t.Fatal(whole)
		}
		if !strings.HasSuffix(whole, "end: EOF\n") && !strings.Contains(whole, "end: pipe: stream ") {
			t.Fatalf("error is not a FormatError:\n%s", whole)
		}
	})
}

// TestDigestOfSamplePipe checks that digest, which FuzzReader relies on,
// sees what a valid pipe holds.
func TestDigestOfSamplePipe(t *testing.T) {
	got := digest(NewReader(bytes.NewReader(samplePipe(t)), checked(t)))
	for _, want := range []string{"uno", `progress "0/16B3749" <nil>`, `binding 1200 "0:16,2:4"`, `error 1250 "table was dropped upstream"`, "end: EOF"} {
		if !strings.Contains(got, want) {
			t.Errorf("digest lacks %q:\n%s", want, got)
		}
	}
}
