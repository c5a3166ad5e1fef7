package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The store writes its files around the page cache (O_DIRECT) where the
// filesystem allows it. A commit syncs every file it writes, so the bytes
// go to the device in any case; through the page cache they are copied
// into pages the kernel must first find (on a busy or virtualised host,
// the larger part of a commit's CPU) and then written back anyway, and
// they push out pages readers use. Direct writes skip both.

// directAlign is the alignment O_DIRECT asks of buffers, file offsets and
// lengths: 4 KiB suits every common device (and is a multiple of 512).
const directAlign = 4096

// directBufSize is how much a direct file gathers before a write.
const directBufSize = 1 << 20

// createTempDirect creates a new file as os.CreateTemp does (mode 0600,
// name prefix + random digits), opened with O_DIRECT. It returns nil and
// no error when the filesystem refuses O_DIRECT (tmpfs, some FUSE
// filesystems).
func createTempDirect(dir, prefix string) (*directFile, error) {
	for try := 0; try < 10000; try++ {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_DIRECT, 0o600)
		switch {
		case errors.Is(err, fs.ErrExist):
			continue
		case errors.Is(err, syscall.EINVAL):
			return nil, nil
		case err != nil:
			return nil, err
		}
		return &directFile{File: f, buf: alignedBuf(directBufSize)}, nil
	}
	return nil, fmt.Errorf("create temp file in %s: no free name", dir)
}

// alignedBuf returns n bytes at a directAlign-aligned address.
func alignedBuf(n int) []byte {
	b := make([]byte, n+directAlign)
	skip := (directAlign - int(uintptr(unsafe.Pointer(&b[0]))&(directAlign-1))) & (directAlign - 1)
	return b[skip : skip+n : skip+n]
}

// directFile is a new file written with O_DIRECT: writes gather in an
// aligned buffer that goes out in whole blocks; Sync writes the last
// block, zero-padded, truncates the file to the bytes written and syncs.
// It only writes: reads and seeks (other than asking the position) fail.
type directFile struct {
	*os.File
	buf  []byte
	n    int   // bytes gathered in buf
	size int64 // bytes written through Write
	err  error // the first failed write: the file is unusable after it
}

func (d *directFile) Write(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	done := 0
	for done < len(p) {
		c := copy(d.buf[d.n:], p[done:])
		d.n += c
		if d.n == len(d.buf) {
			if err := d.write(d.buf); err != nil {
				return done, err
			}
			d.n = 0
		}
		done += c
		d.size += int64(c)
	}
	return done, nil
}

// Sync implements File.
func (d *directFile) Sync() error {
	if d.err != nil {
		return d.err
	}
	if d.n > 0 {
		end := (d.n + directAlign - 1) &^ (directAlign - 1)
		clear(d.buf[d.n:end])
		if err := d.write(d.buf[:end]); err != nil {
			return err
		}
		d.n = 0
		if err := d.File.Truncate(d.size); err != nil {
			d.err = err
			return err
		}
	}
	return d.File.Sync()
}

// write writes whole blocks. A filesystem that opens files with O_DIRECT
// but refuses direct writes (EINVAL) gets them through the page cache:
// O_DIRECT is turned off and the write repeated.
func (d *directFile) write(b []byte) error {
	_, err := d.File.Write(b)
	if errors.Is(err, syscall.EINVAL) {
		var ferr error
		rc, cerr := d.File.SyscallConn()
		if cerr == nil {
			cerr = rc.Control(func(fd uintptr) {
				var fl int
				if fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0); ferr == nil {
					_, ferr = unix.FcntlInt(fd, unix.F_SETFL, fl&^unix.O_DIRECT)
				}
			})
		}
		if cerr == nil && ferr == nil {
			_, err = d.File.Write(b)
		}
	}
	if err != nil {
		d.err = err
	}
	return err
}

var errWriteOnly = errors.New("direct file: write only")

// Read implements File: a direct file only writes.
func (d *directFile) Read([]byte) (int, error) { return 0, errWriteOnly }

// ReadAt implements File: a direct file only writes.
func (d *directFile) ReadAt([]byte, int64) (int, error) { return 0, errWriteOnly }

// Seek implements File: it only reports the position.
func (d *directFile) Seek(off int64, whence int) (int64, error) {
	if off == 0 && whence == io.SeekCurrent {
		return d.size, nil
	}
	return 0, errWriteOnly
}
