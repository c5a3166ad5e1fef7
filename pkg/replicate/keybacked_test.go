package replicate

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/jackc/pglogrepl"

	"github.com/rtrctl/rtrctl/pkg/keystate"
)

// backedState is a key state of kvTable backed by a keystate.DB in a
// temporary directory, its overlay budget bytes.
func backedState(t *testing.T, budget int) *KeyState {
	t.Helper()
	st, err := NewKeyState(kvTable(), []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := keystate.Open(keystate.Config{Dir: t.TempDir(), Ident: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st.SetBacking(db, 0, budget)
	return st
}

// TestKeyStateBacked: random transactions (inserts, updates that keep or
// move the key, TOASTed values left out, deletes, TRUNCATEs) with lost
// connections in the middle, fed to a decoder whose key state is in memory
// and to one whose state spills to disk at every hand-over: both emit the
// same updates and end with the same rows.
func TestKeyStateBacked(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			mem, _ := NewKeyState(kvTable(), []string{"id"})
			disk := backedState(t, 1+int(seed%2)*200)
			flush := 1 + int(seed%3)
			memSinkA, memSinkB := &memSink{}, &memSink{}
			a := newKeyedDecoder(t, memSinkA, mem, flush)
			b := newKeyedDecoder(t, memSinkB, disk, flush)
			both := func(msgs ...pglogrepl.Message) {
				t.Helper()
				must(t, a, msgs...)
				must(t, b, msgs...)
			}
			both(kvRelation())
			model := map[int]string{}
			const keys = 40
			for txn := range 120 {
				lsn := uint64(100 + 10*txn)
				if rng.IntN(25) == 0 {
					both(begin(lsn))
					a.truncateState(a.rels[7])
					b.truncateState(b.rels[7])
					both(commit(lsn))
					a.flush()
					b.flush()
					clear(model)
					continue
				}
				next := maps.Clone(model)
				msgs := []pglogrepl.Message{begin(lsn)}
				for range 1 + rng.IntN(8) {
					k := rng.IntN(keys)
					v, in := next[k]
					switch {
					case !in:
						v = fmt.Sprintf("v%d.%d", k, txn)
						msgs = append(msgs, ins(strconv.Itoa(k), v))
						next[k] = v
					case rng.IntN(3) == 0:
						msgs = append(msgs, del(strconv.Itoa(k), "<null>"))
						delete(next, k)
					case rng.IntN(3) == 0:
						to := rng.IntN(keys)
						if _, taken := next[to]; taken {
							continue
						}
						msgs = append(msgs, upd(text(strconv.Itoa(k), "<null>"), strconv.Itoa(to), "<toast>"))
						delete(next, k)
						next[to] = v
					default:
						v = fmt.Sprintf("u%d.%d", k, txn)
						msgs = append(msgs, upd(nil, strconv.Itoa(k), v))
						next[k] = v
					}
				}
				msgs = append(msgs, commit(lsn))
				if rng.IntN(4) == 0 {
					// Lost in the middle, then sent again whole.
					cut := 1 + rng.IntN(len(msgs)-1)
					both(msgs[:cut]...)
					a.interrupted()
					b.interrupted()
					both(kvRelation())
				}
				both(msgs...)
				model = next
			}
			if len(memSinkA.errs)+len(memSinkB.errs) > 0 {
				t.Fatalf("errors: %q / %q", memSinkA.errs, memSinkB.errs)
			}
			if !slices.Equal(memSinkA.rows, memSinkB.rows) {
				t.Fatalf("in memory the decoder emitted\n%q\non disk\n%q", memSinkA.rows, memSinkB.rows)
			}
			if disk.Spills() == 0 {
				t.Fatal("the state on disk never spilled")
			}
			for k := range keys {
				key, err := mem.keyOf(encodeKV(t, mem, k))
				if err != nil {
					t.Fatal(err)
				}
				key = slices.Clone(key)
				rm, okm, err := mem.get(key)
				if err != nil {
					t.Fatal(err)
				}
				rd, okd, err := disk.get(key)
				if err != nil {
					t.Fatal(err)
				}
				want, in := model[k]
				if okm != in || okd != in || rm != rd {
					t.Errorf("key %d: in memory %v %q, on disk %v %q, want %v %q", k, okm, rm, okd, rd, in, want)
				}
			}
			// Read whole (for a change of key columns): the same rows.
			if err := disk.loadAll(); err != nil {
				t.Fatal(err)
			}
			if got, want := stateRows(t, disk), stateRows(t, mem); !slices.Equal(got, want) {
				t.Errorf("read whole from disk %q, in memory %q", got, want)
			}
		})
	}
}

// encodeKV encodes a row of kvTable with id k (its key is all that is
// read of it).
func encodeKV(t *testing.T, st *KeyState, k int) []byte {
	t.Helper()
	row, err := st.pg.AppendText(nil, 0, []byte(strconv.Itoa(k)), false)
	if err == nil {
		row, err = st.pg.AppendText(row, 1, nil, true)
	}
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// TestKeyStateLoadBacked: a state loaded from a copy straight into a DB
// where an earlier state of the collection loaded other rows (under an
// earlier epoch) reads exactly the copy under its own epoch (Len, every
// key, the whole of it) with an empty overlay; a row of multiplicity 2 is
// refused.
func TestKeyStateLoadBacked(t *testing.T) {
	old := backedState(t, 0) // budget 0: every hand-over spills
	db := old.back.b
	if err := old.LoadBacked(db, 1, 0, func(add func(arrow.Record) error) error {
		return add(kvBatch(t, "1,stale,1", "2,stale,1", "9,gone,1"))
	}); err != nil {
		t.Fatal(err)
	}
	st, err := NewKeyState(kvTable(), []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	err = st.LoadBacked(db, old.Epoch()+1, 1<<20, func(add func(arrow.Record) error) error {
		if err := add(kvBatch(t, "1,a,1", "2,b,1")); err != nil {
			return err
		}
		return add(kvBatch(t, "3,c,1"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Len() != 3 || st.Bytes() != 0 || st.Epoch() != 2 {
		t.Errorf("loaded: %d keys, %d bytes in memory, epoch %d; want 3, 0, 2", st.Len(), st.Bytes(), st.Epoch())
	}
	for k, want := range map[int]string{1: "a", 2: "b", 3: "c", 9: ""} {
		key, err := st.keyOf(encodeKV(t, st, k))
		if err != nil {
			t.Fatal(err)
		}
		row, ok, err := st.get(slices.Clone(key))
		if err != nil {
			t.Fatal(err)
		}
		if ok != (want != "") || ok && !strings.Contains(row, want) {
			t.Errorf("key %d: %v %q, want %q", k, ok, row, want)
		}
	}
	if err := st.loadAll(); err != nil {
		t.Fatal(err)
	}
	if got := stateRows(t, st); !slices.Equal(got, []string{"1,a", "2,b", "3,c"}) {
		t.Errorf("read whole: %q", got)
	}
	bad, _ := NewKeyState(kvTable(), []string{"id"})
	if err := bad.LoadBacked(db, 5, 0, func(add func(arrow.Record) error) error { return add(kvBatch(t, "4,d,2")) }); err == nil {
		t.Error("a row of multiplicity 2 was loaded")
	}
}

// failingScan is a Backing whose rows cannot be read.
type failingScan struct{ Backing }

func (failingScan) Scan(uint32, func(key, row []byte) error) error {
	return errors.New("disk on fire")
}

// TestKeyStateRekeyErrors: a change of the key columns that cannot read
// the state from its disk fails as errStateRead (the stream's error, not
// the collection's), and one that finds two rows with the same new key
// does not (the collection's definite error).
func TestKeyStateRekeyErrors(t *testing.T) {
	st := backedState(t, 0)
	st.SetBacking(failingScan{st.back.b}, 0, 0)
	if err := st.setKey([]int{1}); !errors.Is(err, errStateRead) {
		t.Errorf("rekey over an unreadable backing: %v, want errStateRead", err)
	}
	dup := backedState(t, 0)
	if err := dup.LoadBacked(dup.back.b, 1, 0, func(add func(arrow.Record) error) error {
		return add(kvBatch(t, "1,same,1", "2,same,1"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := dup.setKey([]int{1}); err == nil || errors.Is(err, errStateRead) {
		t.Errorf("rekey onto a duplicate key: %v, want a duplicate key error", err)
	}
}
