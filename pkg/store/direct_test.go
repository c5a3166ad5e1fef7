package store

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestDirectWrite writes files of sizes around the block and buffer
// boundaries, in chunks of random sizes, through the store's temp-file
// writer: on a local disk they are written with O_DIRECT, on tmpfs
// through the page cache, and either way they read back byte for byte.
func TestDirectWrite(t *testing.T) {
	dirs := []string{t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "rtr-direct-")
		if err == nil {
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
		f, err := OSFS{}.CreateTemp(dir, "probe-")
		if err != nil {
			t.Fatal(err)
		}
		_, direct := f.(*directFile)
		f.Close()
		os.Remove(f.Name())
		switch sfs.Type {
		case 0xEF53, 0x58465342: // ext4, xfs
			if !direct {
				t.Errorf("%s (filesystem %#x): no O_DIRECT", dir, sfs.Type)
			}
		}
		t.Logf("%s: filesystem %#x, direct %v", dir, sfs.Type, direct)
		for _, size := range []int{0, 1, 4095, 4096, 4097, directBufSize - 1, directBufSize, directBufSize + 1, 3*directBufSize + 12345} {
			want := make([]byte, size)
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			path, err := writeTempWith(OSFS{}, dir, "t-", func(w io.Writer) error {
				for rest := want; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(3*directAlign))
					if rng.IntN(10) == 0 {
						n = min(len(rest), 1+rng.IntN(2*directBufSize))
					}
					if k, err := w.Write(rest[:n]); err != nil || k != n {
						t.Fatalf("write %d: %d, %v", n, k, err)
					}
					rest = rest[n:]
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: size %d: %v", dir, size, err)
			}
			if !strings.HasPrefix(filepath.Base(path), tmpPrefix+"t-") {
				t.Errorf("temp file %s lacks the prefix", path)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: size %d: read back %d bytes that differ", dir, size, len(got))
			}
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600 as os.CreateTemp gives", fi.Mode().Perm())
			}
			os.Remove(path)
		}
	}
}

// TestDirectWriteFallback: a direct write the filesystem refuses (here an
// unaligned buffer, which every O_DIRECT filesystem refuses with EINVAL)
// goes through the page cache instead.
func TestDirectWriteFallback(t *testing.T) {
	d, err := createTempDirect(t.TempDir(), "f-")
	if err != nil || d == nil {
		t.Fatalf("no O_DIRECT in %s: %v", os.TempDir(), err)
	}
	d.buf = alignedBuf(directBufSize + 1)[1:]
	want := bytes.Repeat([]byte("0123456789"), directBufSize/5+7)
	if n, err := d.Write(want); err != nil || n != len(want) {
		t.Fatalf("write: %d, %v", n, err)
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
