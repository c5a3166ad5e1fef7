package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestLockSource(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.LockHeld("pg") {
		t.Fatal("LockHeld before anyone locked")
	}
	l, err := st.LockSource("pg")
	if err != nil {
		t.Fatal(err)
	}
	if !st.LockHeld("pg") {
		t.Fatal("LockHeld is false while the lock is held")
	}
	pidLine, _ := os.ReadFile(filepath.Join(st.Dir(), "locks", "pg.lock"))
	// A second writer fails with ErrLocked naming the holder. (flock locks
	// belong to open files, so a second open in one process conflicts too.)
	if _, err := st.LockSource("pg"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second LockSource: %v, want ErrLocked", err)
	}
	if after, _ := os.ReadFile(filepath.Join(st.Dir(), "locks", "pg.lock")); string(after) != string(pidLine) {
		t.Fatalf("a failed lock attempt rewrote the holder line: %q -> %q", pidLine, after)
	}
	if _, err := st.LockSource("other"); err != nil {
		t.Fatalf("another source: %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if st.LockHeld("pg") {
		t.Fatal("LockHeld after Unlock")
	}
	// LockHeld checks (shared locks) while a writer takes the lock: the
	// writer retries past them and gets it.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				st.LockHeld("pg")
			}
		}
	}()
	l2, err := st.LockSource("pg")
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("LockSource while readers check LockHeld: %v", err)
	}
	l2.Unlock()
}

func TestOpenConcurrentCreate(t *testing.T) {
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		dir := filepath.Join(t.TempDir(), "new")
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for j := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = Open(ctx, dir, Options{})
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: concurrent Open of a new store: %v", i, err)
			}
		}
	}
	// A directory with other files is still refused.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644)
	if _, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrNoStore) {
		t.Fatalf("Open of a non-empty non-store directory: %v, want ErrNoStore", err)
	}
}

func TestRecordedSources(t *testing.T) {
	st, err := Open(context.Background(), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.RecordedSources(); err != nil || len(got) != 0 {
		t.Fatalf("new store: %v, %v", got, err)
	}
	for _, src := range []string{"pg", "kafka.orders"} {
		if err := st.WriteSourceInfo(SourceInfo{Source: src, Kind: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.RecordedSources()
	if err != nil || len(got) != 2 || got[0] != "kafka.orders" || got[1] != "pg" {
		t.Fatalf("RecordedSources = %v, %v", got, err)
	}
	info, err := st.ReadSourceInfo("kafka.orders")
	if err != nil || info.Kind != "x" {
		t.Fatalf("ReadSourceInfo = %+v, %v", info, err)
	}
}
