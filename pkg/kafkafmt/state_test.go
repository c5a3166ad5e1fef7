package kafkafmt

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestStateTable runs random puts, value changes of every size and deletes
// against a Go map: the table always finds exactly the model's keys with
// their values and fields, through table growth, moved records, arena
// compaction and backward-shift deletion.
func TestStateTable(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		tab := newStateTable()
		type entry struct {
			val  []byte
			gen  uint64
			part int32
			off  int64
			live bool
		}
		model := map[string]*entry{}
		keys := 50 + rng.IntN(3000)
		compactions, removedMany := 0, 0
		for step := 0; step < 40000; step++ {
			k := []byte(fmt.Sprintf("key-%d-%s", rng.IntN(keys), bytes.Repeat([]byte("x"), rng.IntN(3)*7)))
			id, ok, h := tab.find(k)
			m := model[string(k)]
			if ok != (m != nil) {
				t.Fatalf("seed %d step %d: find %q: %v, model has it: %v", seed, step, k, ok, m != nil)
			}
			if ok {
				if got := tab.value(id); !bytes.Equal(got, m.val) {
					t.Fatalf("seed %d step %d: %q = %q, want %q", seed, step, k, got, m.val)
				}
				p, o := tab.pos(id)
				if tab.gen(id) != m.gen || p != m.part || o != m.off || tab.live(id) != m.live {
					t.Fatalf("seed %d step %d: fields of %q differ", seed, step, k)
				}
			}
			switch op := rng.IntN(10); {
			case step == 15000 || step == 30000:
				// Many at once (an eviction): about half the keys.
				var drop []uint32
				tab.each(func(id uint32) {
					if rng.IntN(2) == 0 {
						drop = append(drop, id)
						delete(model, string(tab.key(id)))
					}
				})
				tab.removeMany(drop)
				removedMany++
			case op < 2 && ok:
				tab.remove(id)
				delete(model, string(k))
			default:
				v := bytes.Repeat([]byte{byte(step)}, []int{0, 1, 8, 30, 100, 300}[rng.IntN(6)])
				// Compaction shrinks the arena, in add's allocation or in
				// setValue's (which of them meets the garbage first depends
				// on the table's random hash seed).
				before := len(tab.arena)
				if !ok {
					id = tab.add(k, h, len(v))
					m = &entry{}
					model[string(k)] = m
				}
				tab.setValue(id, v)
				if len(tab.arena) < before {
					compactions++
				}
				m.val = v
				m.gen, m.part, m.off, m.live = uint64(step), int32(step%7), int64(step)*3, step%2 == 0
				tab.setGen(id, m.gen)
				tab.setPos(id, m.part, m.off)
				tab.setLive(id, m.live)
			}
			if tab.len() != len(model) {
				t.Fatalf("seed %d step %d: %d keys, model %d", seed, step, tab.len(), len(model))
			}
		}
		seen := 0
		tab.each(func(id uint32) {
			seen++
			m := model[string(tab.key(id))]
			if m == nil || !bytes.Equal(tab.value(id), m.val) {
				t.Fatalf("seed %d: each gives %q, which the model does not hold so", seed, tab.key(id))
			}
		})
		if seen != len(model) {
			t.Fatalf("seed %d: each gave %d keys, model %d", seed, seen, len(model))
		}
		if compactions == 0 {
			t.Errorf("seed %d: the arena was never compacted", seed)
		}
		if removedMany == 0 {
			t.Errorf("seed %d: removeMany never ran", seed)
		}
		if live := len(tab.arena) - tab.garbage; tab.garbage > 1<<16 && tab.garbage > 2*live+(1<<16) {
			t.Errorf("seed %d: %d bytes of garbage for %d in use", seed, tab.garbage, live)
		}
	}
}
