package kafkafmt

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
)

// mapBacking is a Backing over a map that folds a decoder's flushed
// records only when the test commits them, as pkg/ingest folds what the
// store committed: clean is the frontier below which every record is
// folded.
type mapBacking struct {
	dec     *upsertDecoder
	m       map[string]string
	pending []flushed
	clean   map[int32]int64
	gets    int
	folds   uint64
}

// flushed is a decoder's batch not yet committed: its rows and, per
// partition, one past the last input offset it covers.
type flushed struct {
	rec  arrow.Record
	next map[int32]int64
}

func (b *mapBacking) Get(key, dst []byte) ([]byte, bool, error) {
	b.gets++
	v, ok := b.m[string(key)]
	return append(dst, v...), ok, nil
}

func (b *mapBacking) Clean(p int32, off int64) bool { return off < b.clean[p] }

func (b *mapBacking) Folds() uint64 { return b.folds }

// commit folds the oldest n batches.
func (b *mapBacking) commit(t *testing.T, n int) {
	for _, f := range b.pending[:n] {
		if f.rec != nil {
			err := b.dec.StateRows(f.rec, func(k, v []byte, diff int64) error {
				switch diff {
				case 1:
					b.m[string(k)] = string(v)
				case -1:
					if b.m[string(k)] != string(v) {
						return fmt.Errorf("retraction of %s=%s, backing has %q", k, v, b.m[string(k)])
					}
					delete(b.m, string(k))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			f.rec.Release()
		}
		for p, o := range f.next {
			b.clean[p] = o
		}
	}
	b.pending = append(b.pending[:0], b.pending[n:]...)
	b.folds++
}

// TestUpsertBacked runs random upserts and deletes over many keys and two
// partitions through a decoder whose state is all in memory and one whose
// table is a small cache in front of a backing that lags by a few
// batches: their output is the same batch for batch, and the cached one
// evicts and reads back.
func TestUpsertBacked(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		plain := newDec(t, "upsert", "bytes", "bytes")
		cached := newDec(t, "upsert", "bytes", "bytes").(*upsertDecoder)
		from := int64(rng.IntN(300))
		must[Netting](plain).NetFrom(map[int32]int64{0: from, 1: from})
		cached.NetFrom(map[int32]int64{0: from, 1: from})
		b := &mapBacking{dec: cached, m: map[string]string{}, clean: map[int32]int64{}}
		cached.SetBacking(b, 0, 4<<10)
		keys := 200 + rng.IntN(2000)
		offs := map[int32]int64{}
		for step := 0; step < 6000; step++ {
			p := int32(rng.IntN(2))
			key := []byte(fmt.Sprintf("key-%d", rng.IntN(keys)))
			var value []byte
			if rng.IntN(6) != 0 {
				value = []byte(fmt.Sprintf("v%d-%0*d", rng.IntN(5), rng.IntN(40), 0))
			}
			for _, d := range []Decoder{plain, cached} {
				if err := d.Add(rec(p, offs[p], key, value)); err != nil {
					t.Fatal(err)
				}
			}
			offs[p]++
			if rng.IntN(20) != 0 {
				continue
			}
			a, c := plain.Flush(), cached.Flush()
			// The same rows; the order may differ (a deleted key the cache
			// still holds is touched where the other decoder skips it).
			if got, want := fmt.Sprint(sorted(rows(t, c))), fmt.Sprint(sorted(rows(t, a))); got != want {
				t.Fatalf("seed %d step %d: cached decoder emitted %s, in-memory one %s", seed, step, got, want)
			}
			if a != nil {
				a.Release()
			}
			next := map[int32]int64{}
			for p, o := range offs {
				next[p] = o
			}
			b.pending = append(b.pending, flushed{rec: c, next: next})
			if n := len(b.pending); n > 3 || rng.IntN(3) == 0 {
				b.commit(t, rng.IntN(n+1))
			}
			if p, c := must[Stateful](plain).StateSize(), cached.StateSize(); p != c {
				t.Fatalf("seed %d step %d: %d keys in memory, %d cached", seed, step, p, c)
			}
		}
		if cached.Evicted() == 0 || b.gets == 0 {
			t.Fatalf("seed %d: the cache evicted %d entries and read %d: the test does not exercise it", seed, cached.Evicted(), b.gets)
		}
		if held := cached.state.len(); held >= must[Stateful](plain).StateSize() {
			t.Fatalf("seed %d: the cache holds %d entries of %d keys", seed, held, must[Stateful](plain).StateSize())
		}
	}
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// failingBacking fails every Get.
type failingBacking struct{ mapBacking }

func (failingBacking) Get([]byte, []byte) ([]byte, bool, error) {
	return nil, false, fmt.Errorf("disk on fire")
}

// TestUpsertBackingFails: a backing that fails stops the decoder: the
// Add that reads it or, when Flush applied the last records, Err after
// it; nothing is decoded after.
func TestUpsertBackingFails(t *testing.T) {
	d := newDec(t, "upsert", "bytes", "bytes").(*upsertDecoder)
	d.NetFrom(map[int32]int64{})
	d.SetBacking(&failingBacking{}, 0, 1<<20)
	if err := d.Add(rec(0, 0, []byte("k"), []byte("v"))); err != nil {
		t.Fatalf("a queued record failed at once: %v", err)
	}
	if r := d.Flush(); r != nil {
		r.Release()
	}
	if d.Err() == nil || !strings.Contains(d.Err().Error(), "disk on fire") {
		t.Fatalf("after Flush: Err %v, want the backing's failure", d.Err())
	}
	if err := d.Add(rec(0, 1, []byte("k2"), []byte("v"))); err == nil {
		t.Fatal("Add after the failure succeeded")
	}
	d2 := newDec(t, "upsert", "bytes", "bytes").(*upsertDecoder)
	d2.SetBacking(&failingBacking{}, 0, 1<<20)
	if err := d2.Add(rec(0, 0, []byte("k"), []byte("v"))); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("record by record: Add %v, want the backing's failure", err)
	}
}
