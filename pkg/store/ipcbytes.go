package store

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// bytesMessages is an ipc.MessageReader over IPC stream messages held in
// memory (parts, read in turn): a message's body is a slice of them, not a
// copy, so the record read from it references the bytes read from the
// file (ipc's own reader allocates and copies every body).
type bytesMessages struct {
	parts [][]byte
	msg   *ipc.Message
}

func (r *bytesMessages) Retain() {}

func (r *bytesMessages) Release() {
	if r.msg != nil {
		r.msg.Release()
		r.msg = nil
	}
}

// take returns the next n bytes of the current part.
func (r *bytesMessages) take(n int) ([]byte, error) {
	for len(r.parts) > 0 && len(r.parts[0]) == 0 {
		r.parts = r.parts[1:]
	}
	if len(r.parts) == 0 {
		return nil, io.EOF
	}
	p := r.parts[0]
	if len(p) < n {
		return nil, fmt.Errorf("arrow/ipc: a message of %d bytes where %d are left", n, len(p))
	}
	r.parts[0] = p[n:]
	return p[:n:n], nil
}

// Message implements ipc.MessageReader.
func (r *bytesMessages) Message() (*ipc.Message, error) {
	b, err := r.take(4)
	if err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0xFFFFFFFF {
		if b, err = r.take(4); err != nil {
			return nil, err
		}
		n = binary.LittleEndian.Uint32(b)
	}
	if n == 0 {
		return nil, io.EOF
	}
	meta, err := r.take(int(n))
	if err != nil {
		return nil, err
	}
	head := ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(nil))
	bodyLen := head.BodyLen()
	head.Release()
	if bodyLen < 0 {
		return nil, fmt.Errorf("arrow/ipc: a message body of %d bytes", bodyLen)
	}
	body, err := r.take(int(bodyLen))
	if err != nil {
		return nil, err
	}
	if r.msg != nil {
		r.msg.Release()
	}
	r.msg = ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(body))
	return r.msg, nil
}
