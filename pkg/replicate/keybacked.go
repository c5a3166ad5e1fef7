package replicate

import (
	"errors"
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
)

// Backing is a key state on disk (pkg/keystate's DB): the collection as
// the store holds it when the stream started, plus what the stream's state
// spilled into it since. A KeyState with a backing keeps in memory only
// its overlay: the keys the stream changed since its last spill, and the
// keys it deleted (so that the disk's rows of them are not read). When the
// overlay outgrows its budget at a hand-over (no change of it is open) it
// is spilled and emptied, so memory stays bounded by the budget however
// many keys the table has or one transaction changes.
//
// Spilled changes are the stream's own, not yet the store's: the disk
// forgets them at the next start (keystate.Open), which rebuilds or
// catches up the state from what the store committed instead.
type Backing interface {
	// Lookup appends key's row to dst as the stream sees it: spilled
	// under epoch, else (epoch 0) the collection when the stream started.
	Lookup(epoch uint32, key, dst []byte) ([]byte, bool, error)
	// Spill writes rows (dead: deleted) of keys under epoch; each calls
	// put for every one.
	Spill(epoch uint32, each func(put func(key, row []byte, dead bool) error) error) error
	// Scan calls fn with every key and row Lookup would answer.
	Scan(epoch uint32, fn func(key, row []byte) error) error
}

// backed is a KeyState's backing and what the overlay tracks of it.
type backed struct {
	b Backing
	// epoch is the spill keyspace in use: a TRUNCATE moves to the next,
	// which hides the rows on disk.
	epoch uint32
	// dead are keys deleted by the stream since the last spill, which
	// the disk may still hold.
	dead map[string]struct{}
	// keys is the number of keys when the stream started (Len).
	keys int
	// budget is the overlay's bound in bytes (Bytes).
	budget int
	// full: every row is in the map (loadAll, for a change of the key
	// columns), which is no longer an overlay.
	full   bool
	spills int
	buf    []byte
}

// on reports whether the map is an overlay of a backing.
func (b *backed) on() bool { return b.b != nil && !b.full }

// SetBacking makes b the state (the collection as of where the stream
// resumes, keys keys), the map an overlay of about budget bytes over it.
func (s *KeyState) SetBacking(b Backing, keys, budget int) {
	clear(s.rows)
	s.data = 0
	s.back = backed{b: b, keys: keys, budget: budget, dead: map[string]struct{}{}}
}

// LoadBacked makes s the rows of a copy (a re-snapshot's), written
// straight to b under spill epoch epoch: each calls add with the copy's
// records, as AddState takes them. epoch must be above every epoch
// another state of the collection used in b, so that nothing else is
// read under it. s's map is then an overlay of about budget bytes over
// the copy, as after SetBacking; nothing of the copy is held in memory.
// The copy is of a key the table enforces (its primary key or replica
// identity index), so each key comes once: a row of multiplicity other
// than 1 is an error, and a key repeated with another row is not looked
// for (the later row would win).
func (s *KeyState) LoadBacked(b Backing, epoch uint32, budget int, each func(add func(arrow.Record) error) error) error {
	keys := 0
	err := b.Spill(epoch, func(put func(key, row []byte, dead bool) error) error {
		return each(func(rec arrow.Record) error {
			n, err := s.stateShape(rec)
			if err != nil {
				return err
			}
			return s.stateRows(rec, n, func(key, row []byte, diff int64) error {
				if diff != 1 {
					return fmt.Errorf("load key state of %s: a row of multiplicity %d in the copy (%s)", s.name, diff, s.keyNames())
				}
				keys++
				return put(key, row, false)
			})
		})
	})
	if err != nil {
		return fmt.Errorf("key state of %s: %w", s.name, err)
	}
	s.SetBacking(b, keys, budget)
	s.back.epoch = epoch
	return nil
}

// Epoch is the spill epoch s reads its backing under (0 without one).
func (s *KeyState) Epoch() uint32 { return s.back.epoch }

// Spills is how many times the overlay was spilled to the backing.
func (s *KeyState) Spills() int { return s.back.spills }

// lookup reads key's row from the backing.
func (s *KeyState) lookup(key []byte) (string, bool, error) {
	v, ok, err := s.back.b.Lookup(s.back.epoch, key, s.back.buf[:0])
	if err != nil {
		return "", false, fmt.Errorf("key state of %s: %w", s.name, err)
	}
	s.back.buf = v
	return string(v), ok, nil
}

func (s *KeyState) setDead(k string) {
	if _, dead := s.back.dead[k]; !dead {
		s.back.dead[k] = struct{}{}
		s.data += len(k)
	}
}

func (s *KeyState) undead(k string) {
	if _, dead := s.back.dead[k]; dead {
		delete(s.back.dead, k)
		s.data -= len(k)
	}
}

// spillIfOver spills the overlay to the backing and empties it when it
// is over budget.
func (s *KeyState) spillIfOver() error {
	if !s.back.on() || s.Bytes() <= s.back.budget {
		return nil
	}
	err := s.back.b.Spill(s.back.epoch, func(put func(key, row []byte, dead bool) error) error {
		for k, v := range s.rows {
			if err := put(bytesOf(k), bytesOf(v), false); err != nil {
				return err
			}
		}
		for k := range s.back.dead {
			if err := put(bytesOf(k), nil, true); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("key state of %s: %w", s.name, err)
	}
	clear(s.rows)
	clear(s.back.dead)
	s.data = 0
	s.back.spills++
	return nil
}

// truncated is what a state held before a TRUNCATE emptied it.
type truncated struct {
	rows  map[string]string
	dead  map[string]struct{}
	data  int
	epoch uint32
}

// truncate empties the state and returns what it held.
func (s *KeyState) truncate() *truncated {
	t := &truncated{rows: s.rows, dead: s.back.dead, data: s.data, epoch: s.back.epoch}
	s.rows, s.data = map[string]string{}, 0
	if s.back.on() {
		s.back.dead = map[string]struct{}{}
		s.back.epoch++ // hides what is on disk
	}
	return t
}

// untruncate undoes truncate.
func (s *KeyState) untruncate(t *truncated) {
	s.rows, s.back.dead, s.data, s.back.epoch = t.rows, t.dead, t.data, t.epoch
}

// errStateRead marks a failure to read a key state's backing: the
// state's disk, no fact of the upstream.
var errStateRead = errors.New("read it into memory")

// loadAll reads every row of the backing into the map, which then holds
// the whole state (for a change of the key columns, which rekeys it).
func (s *KeyState) loadAll() error {
	if !s.back.on() {
		return nil
	}
	err := s.back.b.Scan(s.back.epoch, func(key, row []byte) error {
		if _, ok := s.rows[string(key)]; ok {
			return nil
		}
		if _, dead := s.back.dead[string(key)]; dead {
			return nil
		}
		s.putString(string(key), string(row))
		return nil
	})
	if err != nil {
		return fmt.Errorf("key state of %s: %w: %w", s.name, errStateRead, err)
	}
	for k := range s.back.dead {
		s.data -= len(k)
	}
	s.back.dead, s.back.full = nil, true
	return nil
}

// Twin returns an empty state of the same table and key, for use in
// another goroutine (its codec and scratch are its own): a follower that
// folds the store's commits into the state on disk encodes with it.
func (s *KeyState) Twin() (*KeyState, error) {
	if s.my != nil {
		return NewMySQLKeyState(s.my.Table())
	}
	var key []string
	for _, i := range s.key {
		key = append(key, s.names[i])
	}
	return NewKeyState(s.pg.Table(), key)
}
