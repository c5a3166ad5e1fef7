package store

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The store writes the bulk of large files around the page cache
// (O_DIRECT) where the filesystem allows it. A commit syncs every file it
// writes, so the bytes go to the device in any case; through the page
// cache they are first copied into pages the kernel must find (on a busy
// or virtualised host the larger part of a commit's CPU) and then written
// back anyway, and they push out pages readers use. Small files
// (manifests, small batches) are written as before: they are read again
// at once, and a direct write of a few bytes costs a padded block.

// directAlign is the alignment O_DIRECT asks of buffers, file offsets and
// lengths: 4 KiB suits every common device (and is a multiple of 512).
const directAlign = 4096

// directFrom is the size from which a file's writes go direct, and the
// size of the aligned buffer they gather in; a multiple of directAlign.
const directFrom = 1 << 20

// directBufs recycles the aligned buffers of direct files.
var directBufs = sync.Pool{New: func() any { return alignedBuf(directFrom) }}

// createTemp creates a new file as os.CreateTemp does, whose writes past
// its first directFrom bytes go around the page cache.
func createTemp(dir, prefix string) (*directFile, error) {
	f, err := os.CreateTemp(dir, prefix+"*")
	if err != nil {
		return nil, err
	}
	return &directFile{File: f}, nil
}

// alignedBuf returns n bytes at a directAlign-aligned address.
func alignedBuf(n int) []byte {
	b := make([]byte, n+directAlign)
	skip := (directAlign - int(uintptr(unsafe.Pointer(&b[0]))&(directAlign-1))) & (directAlign - 1)
	return b[skip : skip+n : skip+n]
}

// directFile is a new file that writes its first directFrom bytes through
// the page cache, then turns on O_DIRECT and writes the rest in whole
// aligned buffers; Sync writes what is left through the page cache again
// (so no padding is ever written) and syncs. It only writes: reads and
// seeks (other than asking the position) fail.
type directFile struct {
	*os.File
	buf    []byte // gathers direct writes, nil before the file reaches directFrom
	n      int    // bytes gathered in buf
	size   int64  // bytes written through Write
	direct bool   // O_DIRECT is on
	err    error  // the first failed write: the file is unusable after it
	// directWrites counts the writes made with O_DIRECT (for tests).
	directWrites int
}

func (d *directFile) Write(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	done := 0
	if d.buf == nil {
		// Through the page cache up to directFrom, an aligned offset.
		k := len(p)
		if rest := directFrom - d.size; int64(k) >= rest {
			k = int(rest)
		}
		n, err := d.File.Write(p[:k])
		d.size += int64(n)
		if err != nil {
			d.err = err
			return n, err
		}
		if k == len(p) {
			return k, nil
		}
		done = k
		d.buf = directBufs.Get().([]byte)
		d.direct = d.setDirect(true) == nil
	}
	for done < len(p) {
		c := copy(d.buf[d.n:], p[done:])
		d.n += c
		done += c
		d.size += int64(c)
		if d.n == len(d.buf) {
			if err := d.write(d.buf); err != nil {
				return done - d.n, err
			}
			d.n = 0
		}
	}
	return done, nil
}

// write writes b, whole aligned blocks when direct. A filesystem that
// takes O_DIRECT but refuses a direct write (EINVAL) gets it, and the
// rest of the file, through the page cache.
func (d *directFile) write(b []byte) error {
	_, err := d.File.Write(b)
	if d.direct && err == nil {
		d.directWrites++
	}
	if d.direct && errors.Is(err, syscall.EINVAL) {
		if d.setDirect(false) == nil {
			d.direct = false
			_, err = d.File.Write(b)
		}
	}
	if err != nil {
		d.err = err
	}
	return err
}

// setDirect turns O_DIRECT on or off.
func (d *directFile) setDirect(on bool) error {
	rc, err := d.File.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		var fl int
		if fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0); ferr != nil {
			return
		}
		if on {
			fl |= unix.O_DIRECT
		} else {
			fl &^= unix.O_DIRECT
		}
		_, ferr = unix.FcntlInt(fd, unix.F_SETFL, fl)
	}); err != nil {
		return err
	}
	return ferr
}

// Sync implements File.
func (d *directFile) Sync() error {
	if err := d.Flush(); err != nil {
		return err
	}
	return d.File.Sync()
}

// Flush writes what is buffered (through the page cache), without a sync.
func (d *directFile) Flush() error {
	if d.err != nil {
		return d.err
	}
	if d.n > 0 {
		if d.direct {
			if err := d.setDirect(false); err != nil {
				d.err = err
				return err
			}
			d.direct = false
		}
		if err := d.write(d.buf[:d.n]); err != nil {
			return err
		}
		d.n = 0
	}
	return nil
}

// Close implements File.
func (d *directFile) Close() error {
	if d.buf != nil {
		directBufs.Put(d.buf)
		d.buf = nil
	}
	return d.File.Close()
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
