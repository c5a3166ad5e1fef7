package kafkafmt

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
)

// stateTable is the upsert envelope's state: key bytes -> the key's entry
// (its value, whether it is live, and what netting notes about it).
//
// It holds no pointers, so the garbage collector never scans it: the keys,
// values and entry fields live in one byte arena, an open-addressing table
// with linear probing maps a key's hash to an entry id, and ids map to
// arena offsets. A lookup touches one table slot and one arena record
// (fields, key and value side by side) where a Go map of pointers touched
// the map's group, the key string, the entry and its value, each a cache
// miss once the state outgrows the caches.
//
// A record is, from an 8-aligned offset: klen, vcap, vlen, flags (uint32
// each), gen (uint64), part (int32, then 4 bytes unused), off (int64), the
// key, then vcap bytes for the value, padded to 8 bytes.
type stateTable struct {
	seed  maphash.Seed
	slots []uint64 // 0: empty; else tag<<32 | (id+1), tag the hash's top half
	ids   []uint64 // id -> arena offset of its record
	free  []uint32 // ids not in use
	arena []byte
	// garbage is the bytes of records no id points to any more.
	garbage int
	n       int // ids in use
}

const (
	recHeader = 40
	flagLive  = 1
)

func newStateTable() *stateTable {
	return &stateTable{seed: maphash.MakeSeed(), slots: make([]uint64, 16)}
}

func (t *stateTable) len() int { return t.n }

// find returns the id of key, whether it is there, and key's hash (for
// add).
func (t *stateTable) find(key []byte) (uint32, bool, uint64) {
	h := t.hash(key)
	id, ok := t.findHashed(key, h)
	return id, ok, h
}

func (t *stateTable) hash(key []byte) uint64 { return maphash.Bytes(t.seed, key) }

// touch reads the slot, id and record a lookup of hash h starts with, and
// returns something of them (so that the reads stay). Touching the hashes
// of a batch of keys before looking them up lets their cache misses
// overlap instead of coming one after the other.
func (t *stateTable) touch(h uint64) uint64 {
	s := t.slots[h&uint64(len(t.slots)-1)]
	if s == 0 {
		return 0
	}
	return s + uint64(t.arena[t.ids[uint32(s)-1]])
}

// touchID reads the start of id's record, as touch does.
func (t *stateTable) touchID(id uint32) uint64 { return uint64(t.arena[t.ids[id]]) }

// findHashed is find of a key whose hash is h.
func (t *stateTable) findHashed(key []byte, h uint64) (uint32, bool) {
	tag := h >> 32
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return 0, false
		}
		if s>>32 == tag {
			id := uint32(s) - 1
			if bytes.Equal(t.key(id), key) {
				return id, true
			}
		}
	}
}

// add adds key, which find did not find, with hash h: not live, with an
// empty value (room for vcap bytes) and zero fields.
func (t *stateTable) add(key []byte, h uint64, vcap int) uint32 {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	var id uint32
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		id = uint32(len(t.ids))
		t.ids = append(t.ids, 0)
	}
	t.ids[id] = t.alloc(key, vcap)
	t.n++
	t.place(h, id)
	return id
}

// place puts id, whose key hashes to h, into the first free slot of its
// probe sequence.
func (t *stateTable) place(h uint64, id uint32) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = h>>32<<32 | uint64(id+1)
}

// grow doubles the table and places every id again.
func (t *stateTable) grow() {
	old := t.slots
	t.slots = make([]uint64, 2*len(old))
	for _, s := range old {
		if s != 0 {
			id := uint32(s) - 1
			t.place(maphash.Bytes(t.seed, t.key(id)), id)
		}
	}
}

// remove removes id (and its key) from the table.
func (t *stateTable) remove(id uint32) {
	h := maphash.Bytes(t.seed, t.key(id))
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for uint32(t.slots[i]) != id+1 {
		i = (i + 1) & mask
	}
	// Backward-shift deletion: move later entries of the probe run into
	// the hole when their home slot allows it, so that lookups stop at
	// the first empty slot and no tombstones pile up.
	for j := (i + 1) & mask; t.slots[j] != 0; j = (j + 1) & mask {
		home := maphash.Bytes(t.seed, t.key(uint32(t.slots[j])-1)) & mask
		// The entry at j may move to i unless its home lies in (i, j].
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = 0
	t.garbage += t.recSize(t.ids[id])
	t.free = append(t.free, id)
	t.n--
	if t.n == 0 {
		t.arena, t.garbage, t.ids, t.free = t.arena[:0], 0, t.ids[:0], t.free[:0]
	}
}

// removeMany removes ids (distinct) from the table at once: the table is
// rebuilt for the ids that stay, sized for them, in one pass over its
// slots. An eviction drops most of a table over budget (every clean
// entry, when the slots alone take most of the budget), which one
// backward-shift removal at a time, each hashing the keys of its probe
// run again, had made a Flush of the Kafka bench's 10M-key state take
// seconds (a goroutine dump of the stall had the stream in remove).
func (t *stateTable) removeMany(ids []uint32) {
	if len(ids) == 0 {
		return
	}
	gone := make([]bool, len(t.ids))
	for _, id := range ids {
		gone[id] = true
		t.garbage += t.recSize(t.ids[id])
		t.free = append(t.free, id)
		t.n--
	}
	size := 16
	for size < 2*(t.n+1) {
		size *= 2
	}
	old := t.slots
	t.slots = make([]uint64, size)
	for _, s := range old {
		if s != 0 && !gone[uint32(s)-1] {
			id := uint32(s) - 1
			t.place(maphash.Bytes(t.seed, t.key(id)), id)
		}
	}
	if t.n == 0 {
		t.arena, t.garbage, t.ids, t.free = t.arena[:0], 0, t.ids[:0], t.free[:0]
	}
}

// alloc appends a record for key with room for vcap value bytes to the
// arena, compacting it first when most of it is garbage.
func (t *stateTable) alloc(key []byte, vcap int) uint64 {
	size := recSizeOf(len(key), vcap)
	if t.garbage > 1<<16 && t.garbage > len(t.arena)/2 {
		t.compact(size)
	}
	off := len(t.arena)
	if off+size > cap(t.arena) {
		a := make([]byte, off, max(2*cap(t.arena), off+size, 1<<12))
		copy(a, t.arena)
		t.arena = a
	}
	t.arena = t.arena[:off+size]
	r := t.arena[off : off+recHeader]
	clear(r)
	binary.LittleEndian.PutUint32(r[0:], uint32(len(key)))
	binary.LittleEndian.PutUint32(r[4:], uint32(vcap))
	copy(t.arena[off+recHeader:], key)
	return uint64(off)
}

func recSizeOf(klen, vcap int) int { return (recHeader + klen + vcap + 7) &^ 7 }

func (t *stateTable) recSize(off uint64) int {
	r := t.arena[off:]
	return recSizeOf(int(binary.LittleEndian.Uint32(r[0:])), int(binary.LittleEndian.Uint32(r[4:])))
}

// compact copies the live records into a new arena with room for extra
// more bytes.
func (t *stateTable) compact(extra int) {
	a := make([]byte, 0, max(2*(len(t.arena)-t.garbage)+extra, 1<<12))
	inUse := make([]bool, len(t.ids))
	for _, s := range t.slots {
		if s != 0 {
			inUse[uint32(s)-1] = true
		}
	}
	for id, off := range t.ids {
		if !inUse[id] {
			continue
		}
		size := t.recSize(off)
		t.ids[id] = uint64(len(a))
		a = append(a, t.arena[off:off+uint64(size)]...)
	}
	t.arena, t.garbage = a, 0
}

func (t *stateTable) rec(id uint32) []byte { return t.arena[t.ids[id]:] }

// key returns id's key; it is valid until the next add or setValue.
func (t *stateTable) key(id uint32) []byte {
	r := t.rec(id)
	return r[recHeader : recHeader+binary.LittleEndian.Uint32(r[0:])]
}

// value returns id's value; it is valid until the next add or setValue.
func (t *stateTable) value(id uint32) []byte {
	r := t.rec(id)
	k := recHeader + binary.LittleEndian.Uint32(r[0:])
	return r[k : k+binary.LittleEndian.Uint32(r[8:])]
}

// setValue makes v id's value, in place when it fits without holding on
// to much more memory than v needs, and in a new record otherwise.
func (t *stateTable) setValue(id uint32, v []byte) {
	r := t.rec(id)
	klen := int(binary.LittleEndian.Uint32(r[0:]))
	vcap := int(binary.LittleEndian.Uint32(r[4:]))
	if n := len(v); n > vcap || vcap > 2*n+64 {
		// A new record: the fields and key move with it.
		old := t.ids[id]
		size := t.recSize(old)
		var hdr [recHeader]byte
		copy(hdr[:], r)
		key := append([]byte(nil), r[recHeader:recHeader+klen]...)
		off := t.alloc(key, (n+7)&^7)
		t.garbage += size
		t.ids[id] = off
		r = t.arena[off:]
		vcap = int(binary.LittleEndian.Uint32(r[4:]))
		copy(r[8:recHeader], hdr[8:])
	}
	binary.LittleEndian.PutUint32(r[8:], uint32(len(v)))
	copy(r[recHeader+klen:], v)
}

func (t *stateTable) live(id uint32) bool {
	return binary.LittleEndian.Uint32(t.rec(id)[12:])&flagLive != 0
}

func (t *stateTable) setLive(id uint32, live bool) {
	var f uint32
	if live {
		f = flagLive
	}
	binary.LittleEndian.PutUint32(t.rec(id)[12:], f)
}

func (t *stateTable) gen(id uint32) uint64 { return binary.LittleEndian.Uint64(t.rec(id)[16:]) }

func (t *stateTable) setGen(id uint32, g uint64) { binary.LittleEndian.PutUint64(t.rec(id)[16:], g) }

// pos is the position (partition, offset) netting noted for id.
func (t *stateTable) pos(id uint32) (int32, int64) {
	r := t.rec(id)
	return int32(binary.LittleEndian.Uint32(r[24:])), int64(binary.LittleEndian.Uint64(r[32:]))
}

func (t *stateTable) setPos(id uint32, part int32, off int64) {
	r := t.rec(id)
	binary.LittleEndian.PutUint32(r[24:], uint32(part))
	binary.LittleEndian.PutUint64(r[32:], uint64(off))
}

// each calls fn with the id of every key.
func (t *stateTable) each(fn func(id uint32)) {
	for _, s := range t.slots {
		if s != 0 {
			fn(uint32(s) - 1)
		}
	}
}
