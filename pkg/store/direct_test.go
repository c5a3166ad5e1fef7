package store

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
)

// TestDirectWrite writes files of sizes around the block boundaries and
// the size from which writes go direct, in chunks of random sizes: they
// read back byte for byte, files of more than directFrom bytes are written
// with O_DIRECT on a local disk (ext4, xfs), smaller ones never.
func TestDirectWrite(t *testing.T) {
	dirs := []string{t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "rtr-direct-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			dirs = append(dirs, d)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dir := range dirs {
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(dir, &sfs); err != nil {
			t.Fatal(err)
		}
		local := sfs.Type == 0xEF53 || sfs.Type == 0x58465342 // ext4, xfs
		for _, size := range []int{0, 1, 4095, 4096, 4097, directFrom - 1, directFrom, directFrom + 1, directFrom + 4096, 2*directFrom + 1, 3*directFrom + 12345} {
			want := make([]byte, size)
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			f, err := OSFS{}.CreateTemp(dir, "t-")
			if err != nil {
				t.Fatal(err)
			}
			for rest := want; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(3*directAlign))
				if rng.IntN(10) == 0 {
					n = min(len(rest), 1+rng.IntN(2*directFrom))
				}
				if k, err := f.Write(rest[:n]); err != nil || k != n {
					t.Fatalf("write %d: %d, %v", n, k, err)
				}
				rest = rest[n:]
			}
			if err := f.Sync(); err != nil {
				t.Fatalf("%s: size %d: sync: %v", dir, size, err)
			}
			d := f.(*directFile)
			switch {
			case size <= directFrom && d.directWrites > 0:
				t.Errorf("%s: size %d: %d direct writes, want none", dir, size, d.directWrites)
			case size >= 2*directFrom && local && d.directWrites == 0:
				t.Errorf("%s (filesystem %#x): size %d: no direct writes", dir, sfs.Type, size)
			}
			f.Close()
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: size %d: read back %d bytes that differ", dir, size, len(got))
			}
			os.Remove(f.Name())
		}
	}
}

// TestDirectWriteFallback: a direct write the filesystem refuses (here an
// unaligned buffer, which every O_DIRECT filesystem refuses with EINVAL)
// goes through the page cache instead, as does the rest of the file.
func TestDirectWriteFallback(t *testing.T) {
	d, err := createTemp(t.TempDir(), "f-")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.setDirect(true); err != nil {
		t.Fatalf("O_DIRECT on %s: %v", os.TempDir(), err)
	}
	d.direct = true
	want := bytes.Repeat([]byte("0123456789"), 1000)
	if err := d.write(alignedBuf(len(want) + 1)[1:]); err != nil {
		t.Fatalf("unaligned write: %v", err)
	}
	if d.direct || d.directWrites != 0 {
		t.Fatalf("still direct (%v) after a refused write, %d direct writes", d.direct, d.directWrites)
	}
	if _, err := d.File.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if err := d.write(want); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	got, err := os.ReadFile(d.Name())
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (%v), want %d equal ones", len(got), err, len(want))
	}
}
