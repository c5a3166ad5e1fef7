package replicate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// KeyState is what replicating a table whose replica identity is DEFAULT
// (its primary key) or USING INDEX needs to retract the old row of an
// update or delete exactly: pgoutput sends only the key of the old row (a
// delete, an update that changes the key) or nothing of it (an update that
// keeps the key), and leaves unchanged TOASTed values out of the new one.
// The state maps the encoding of every key (pgarrow.RowCodec) to the
// encoding of its current row; the decoder looks the old row up, fills in
// unchanged TOASTed values from it, and keeps the state in step with what
// it emits. A MySQL or MariaDB table's state (NewMySQLKeyState, keyed by
// the primary key, encoded by a myarrow.RowCodec) does the same for row
// events written under binlog_row_image MINIMAL or NOBLOB (mykeyed.go).
//
// Memory: per key, its encoded key and row (the row's columns as a
// RowCodec encodes them, a little under their text size for numbers and
// about their size for text) in one allocation, plus the map's entry
// (Bytes estimates it). Nothing of the Arrow records it was built from is
// kept.
//
// A state is rebuilt from a store (ResetState, AddState, EndState:
// store.Shard.ScanAsOf's callbacks) before the stream resumes from the
// time it was read at, or backed by a key state on disk (SetBacking:
// pkg/keystate, kept by rtrctl ingest), in which case the map is an
// overlay of bounded size over it (keybacked.go). It is not safe for
// concurrent use.
type KeyState struct {
	codec rowCodec
	pg    *pgarrow.RowCodec // a PostgreSQL table's (codec), else nil
	my    *myarrow.RowCodec // a MySQL or MariaDB table's (codec), else nil
	name  string            // the collection
	names []string          // its columns
	ncols int
	key   []int // key column indexes, ascending
	// rows maps a key's encoding to its row's; each entry's key and value
	// share one allocation (see put).
	rows map[string]string
	data int // len(key) + len(row) over rows, and len(key) over dead

	back backed // the state on disk the map is an overlay of (keybacked.go)

	loading map[string][]loadRow // keys seen other than as one insertion, while rebuilding
	cols    [][]byte             // scratch: one row's columns
	buf     []byte               // scratch: a key
}

// loadRow is a row of a key and its multiplicity while a state is rebuilt.
type loadRow struct {
	row string
	n   int64
}

// rowCodec is what a state needs of a table's row encoding
// (pgarrow.RowCodec, myarrow.RowCodec): equal Arrow values encode to
// equal bytes.
type rowCodec interface {
	Len(b []byte, i int) (int, error)
	CheckTypes(types []arrow.DataType) error
	AppendArrow(dst []byte, i int, arr arrow.Array, j int) ([]byte, error)
}

// NewKeyState returns an empty state of t's rows keyed by the columns
// named key (the replica identity's: the primary key, or the USING INDEX
// index's columns).
func NewKeyState(t *pgarrow.Table, key []string) (*KeyState, error) {
	c := pgarrow.NewRowCodec(t)
	names := make([]string, len(t.Columns))
	for i, col := range t.Columns {
		names[i] = col.Name
	}
	return newKeyState(c, t.QualifiedName(), names, key, func(s *KeyState) { s.pg = c })
}

// NewMySQLKeyState returns an empty state of the rows of t, a MySQL or
// MariaDB table, keyed by its primary key (the columns a MINIMAL or
// NOBLOB before image carries).
func NewMySQLKeyState(t *myarrow.Table) (*KeyState, error) {
	c := myarrow.NewRowCodec(t)
	names := make([]string, len(t.Columns))
	for i, col := range t.Columns {
		names[i] = col.Name
	}
	var key []string
	for _, i := range t.PrimaryKey {
		key = append(key, t.Columns[i].Name)
	}
	return newKeyState(c, t.QualifiedName(), names, key, func(s *KeyState) { s.my = c })
}

func newKeyState(c rowCodec, name string, names, key []string, set func(*KeyState)) (*KeyState, error) {
	s := &KeyState{codec: c, name: name, names: names, ncols: len(names), rows: map[string]string{}, cols: make([][]byte, len(names))}
	set(s)
	var idx []int
	for _, k := range key {
		i := slices.Index(names, k)
		if i < 0 {
			return nil, fmt.Errorf("key state of %s: no key column %s", name, k)
		}
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return nil, fmt.Errorf("key state of %s: no key columns", name)
	}
	slices.Sort(idx)
	s.key = slices.Compact(idx)
	return s, nil
}

// Len is the number of keys.
func (s *KeyState) Len() int {
	if s.back.b != nil {
		return s.back.keys
	}
	return len(s.rows)
}

// keyEntryOverhead estimates what a key costs beyond its encoded key and
// row: the map's slot (two string headers), its control byte and load
// factor, and the allocation's rounding to a size class. Measured by
// TestKeyStateMemory (about 50 bytes with Go 1.26's maps).
const keyEntryOverhead = 56

// Bytes estimates the memory the state holds.
func (s *KeyState) Bytes() int { return s.data + keyEntryOverhead*(len(s.rows)+len(s.back.dead)) }

// Table is the PostgreSQL table whose rows the state holds (nil for a
// MySQL one).
func (s *KeyState) Table() *pgarrow.Table {
	if s.pg == nil {
		return nil
	}
	return s.pg.Table()
}

// MySQLTable is the MySQL or MariaDB table whose rows the state holds
// (nil for a PostgreSQL one).
func (s *KeyState) MySQLTable() *myarrow.Table {
	if s.my == nil {
		return nil
	}
	return s.my.Table()
}

// Ident describes what the state's encoding depends on: the source
// kind, the columns and their types, and the key columns.
func (s *KeyState) Ident() string {
	var fields []arrow.Field
	kind := "mysql"
	switch {
	case s.pg != nil:
		kind, fields = "pg", s.pg.Table().Fields()
	case s.my != nil:
		fields = s.my.Table().Fields()
	}
	return fmt.Sprintf("%s rows keyed by (%s): %s", kind, s.keyNames(), arrow.NewSchema(fields, nil))
}

// Collection is the collection whose rows the state holds.
func (s *KeyState) Collection() string { return s.name }

// keyNames lists the key columns.
func (s *KeyState) keyNames() string {
	var names []string
	for _, i := range s.key {
		names = append(names, s.names[i])
	}
	return strings.Join(names, ", ")
}

// split cuts row into its columns (s.cols, valid until the next split).
func (s *KeyState) split(row []byte) ([][]byte, error) {
	off := 0
	for i := range s.ncols {
		n, err := s.codec.Len(row[off:], i)
		if err != nil {
			return nil, fmt.Errorf("key state of %s: column %s: %w", s.name, s.names[i], err)
		}
		s.cols[i] = row[off : off+n]
		off += n
	}
	if off != len(row) {
		return nil, fmt.Errorf("key state of %s: %d bytes after the last column", s.name, len(row)-off)
	}
	return s.cols, nil
}

// keyOf returns the key of an encoded row (valid until the next keyOf).
func (s *KeyState) keyOf(row []byte) ([]byte, error) {
	cols, err := s.split(row)
	if err != nil {
		return nil, err
	}
	s.buf = s.buf[:0]
	for _, i := range s.key {
		s.buf = append(s.buf, cols[i]...)
	}
	return s.buf, nil
}

// get returns key's row.
func (s *KeyState) get(key []byte) (string, bool, error) {
	r, ok := s.rows[string(key)]
	if ok || !s.back.on() {
		return r, ok, nil
	}
	if _, dead := s.back.dead[string(key)]; dead {
		return "", false, nil
	}
	return s.lookup(key)
}

// put makes row key's row and returns the one it replaces.
func (s *KeyState) put(key, row []byte) prior {
	// One allocation holds both; neither is modified after.
	b := make([]byte, len(key)+len(row))
	copy(b, key)
	copy(b[len(key):], row)
	k := unsafe.String(unsafe.SliceData(b), len(key))
	v := unsafe.String(unsafe.SliceData(b[len(key):]), len(row))
	if len(row) == 0 {
		v = ""
	}
	p := s.entry(k)
	s.undead(k)
	s.putString(k, v)
	return p
}

func (s *KeyState) putString(k, v string) (string, bool) {
	old, had := s.rows[k]
	if had {
		s.data -= len(k) + len(old)
	}
	s.rows[k] = v
	s.data += len(k) + len(v)
	return old, had
}

// prior is what the map held of a key before a change: its row (had),
// or that it is deleted over the state on disk (dead), or neither.
type prior struct {
	row       string
	had, dead bool
}

// entry is what the map holds of k.
func (s *KeyState) entry(k string) prior {
	if row, had := s.rows[k]; had {
		return prior{row: row, had: true}
	}
	_, dead := s.back.dead[k]
	return prior{dead: dead}
}

// del removes key and returns what the map held of it.
func (s *KeyState) del(key []byte) prior {
	p := s.entry(string(key))
	if p.had {
		delete(s.rows, string(key))
		s.data -= len(key) + len(p.row)
	}
	if s.back.on() && !p.dead {
		// Deleted over the state on disk, which may hold it.
		s.setDead(string(key))
	}
	return p
}

// restore puts back what the map held of key before an undone change.
func (s *KeyState) restore(key string, p prior) {
	if old, ok := s.rows[key]; ok {
		delete(s.rows, key)
		s.data -= len(key) + len(old)
	}
	s.undead(key)
	switch {
	case p.had:
		s.putString(key, p.row)
	case p.dead:
		s.setDead(key)
	case s.back.full:
		// Every row is in the map, and this one was on disk only.
		if row, ok, err := s.back.b.Lookup(s.back.epoch, []byte(key), nil); err == nil && ok {
			s.putString(key, string(row))
		}
	}
}

// errDuplicateKey: two rows have one key.
var errDuplicateKey = errors.New("two rows have the same key")

// setKey keys the state by the columns key (indexes, ascending) from now
// on: every row's key is taken again from the row.
func (s *KeyState) setKey(key []int) error {
	if slices.Equal(key, s.key) {
		return nil
	}
	if err := s.loadAll(); err != nil {
		return err
	}
	old := s.key
	s.key = key
	rows := make(map[string]string, len(s.rows))
	for _, row := range s.rows {
		k, err := s.keyOf([]byte(row))
		if err == nil {
			if _, dup := rows[string(k)]; dup {
				err = fmt.Errorf("%w (%s)", errDuplicateKey, s.keyNames())
			}
		}
		if err != nil {
			s.key = old
			return err
		}
		rows[string(k)] = row
	}
	s.rows = rows
	s.data = 0
	for k, v := range rows {
		s.data += len(k) + len(v)
	}
	return nil
}

// ResetState starts a rebuild: the state is empty (and in memory).
func (s *KeyState) ResetState() {
	s.back = backed{}
	clear(s.rows)
	s.data = 0
	s.loading = map[string][]loadRow{}
}

// AddState adds updates of the collection: its user columns, then _time
// and _diff (a store's ScanAsOf batches), or _diff alone, or _time,
// _diff and _partition (a MySQL copy's data records).
func (s *KeyState) AddState(rec arrow.Record) error {
	name := s.name
	if s.loading == nil {
		return fmt.Errorf("rebuild key state of %s: AddState before ResetState", name)
	}
	n, err := s.stateShape(rec)
	if err != nil {
		return err
	}
	return s.stateRows(rec, n, func(key, row []byte, diff int64) error {
		s.load(key, row, diff)
		return nil
	})
}

// stateShape returns how many columns of rec AddState reads (its user
// columns, [_time,] _diff), or why it cannot.
func (s *KeyState) stateShape(rec arrow.Record) (int, error) {
	n := int(rec.NumCols())
	if n == s.ncols+3 && rec.ColumnName(n-1) == pipe.ColPartition {
		n-- // the partition is the time's
	}
	shape := n == s.ncols+1 || n == s.ncols+2 && rec.ColumnName(s.ncols) == pipe.ColTime
	if !shape || rec.ColumnName(n-1) != pipe.ColDiff {
		return 0, fmt.Errorf("rebuild key state of %s: a batch of %d columns, want its %d, [_time,] _diff", s.name, n, s.ncols)
	}
	return n, nil
}

// StateRows calls fn with the key, row and _diff of every update in rec
// (the collection's user columns, then _time and _diff: a store's
// batches), as the state encodes them: keystate.Codec.
func (s *KeyState) StateRows(rec arrow.Record, fn func(key, row []byte, diff int64) error) error {
	di := rec.Schema().FieldIndices(pipe.ColDiff)
	if int(rec.NumCols()) < s.ncols+2 || rec.ColumnName(s.ncols) != pipe.ColTime || len(di) != 1 || di[0] <= s.ncols {
		return fmt.Errorf("key state of %s: a batch of columns %v, want its %d, then _time and _diff", s.name, rec.Schema().Fields(), s.ncols)
	}
	return s.stateRows(rec, di[0]+1, fn)
}

func (s *KeyState) stateRows(rec arrow.Record, n int, fn func(key, row []byte, diff int64) error) error {
	name := s.name
	diffs, ok := rec.Column(n - 1).(*array.Int64)
	if !ok {
		return fmt.Errorf("rebuild key state of %s: _diff is %s", name, rec.Column(n-1).DataType())
	}
	types := make([]arrow.DataType, s.ncols)
	for i := range types {
		types[i] = rec.Column(i).DataType()
	}
	if err := s.codec.CheckTypes(types); err != nil {
		return fmt.Errorf("rebuild key state of %s: the store's %w", name, err)
	}
	var row []byte
	for j := range int(rec.NumRows()) {
		row = row[:0]
		var err error
		for i := range s.ncols {
			if row, err = s.codec.AppendArrow(row, i, rec.Column(i), j); err != nil {
				return fmt.Errorf("rebuild key state of %s: %w", name, err)
			}
		}
		key, err := s.keyOf(row)
		if err != nil {
			return fmt.Errorf("rebuild key state of %s: %w", name, err)
		}
		if err := fn(key, row, diffs.Value(j)); err != nil {
			return err
		}
	}
	return nil
}

// load folds one update into the state being rebuilt: a first insertion
// of a key goes straight in; anything else about the key is gathered in
// loading until EndState sums it.
func (s *KeyState) load(key, row []byte, diff int64) {
	if diff == 0 {
		return
	}
	lr, pending := s.loading[string(key)]
	if !pending {
		if _, in := s.rows[string(key)]; !in && diff == 1 {
			s.put(key, row)
			return
		}
		if p := s.del(key); p.had {
			lr = append(lr, loadRow{p.row, 1})
		}
	}
	for i := range lr {
		if lr[i].row == string(row) {
			lr[i].n += diff
			s.loading[string(key)] = lr
			return
		}
	}
	s.loading[string(key)] = append(lr, loadRow{string(row), diff})
}

// EndState ends a rebuild: every key must have exactly one row, once.
func (s *KeyState) EndState() error {
	defer func() { s.loading = nil }()
	for k, lr := range s.loading {
		var live []loadRow
		for _, r := range lr {
			if r.n != 0 {
				live = append(live, r)
			}
		}
		switch {
		case len(live) == 0:
		case len(live) == 1 && live[0].n == 1:
			s.putString(k, live[0].row)
		default:
			return fmt.Errorf("rebuild key state of %s: %w (%s): %d rows, multiplicities %v", s.name, errDuplicateKey, s.keyNames(), len(live), multiplicities(live))
		}
	}
	return nil
}

func multiplicities(rs []loadRow) []int64 {
	var out []int64
	for _, r := range rs {
		out = append(out, r.n)
	}
	return out
}

// undoEntry is what one key had before a change not yet emitted, or
// (trunc) what a state held before a TRUNCATE.
type undoEntry struct {
	st    *KeyState
	key   string
	prior prior
	trunc *truncated
}

// undoLog notes the changes of key states that are not handed over yet,
// so that a lost connection takes the states back to what was.
type undoLog []undoEntry

// put and del change a key state, noting what to undo.
func (u *undoLog) put(st *KeyState, key, row []byte) {
	p := st.put(key, row)
	*u = append(*u, undoEntry{st: st, key: string(key), prior: p})
}

func (u *undoLog) del(st *KeyState, key []byte) {
	p := st.del(key)
	*u = append(*u, undoEntry{st: st, key: string(key), prior: p})
}

// truncate empties st (a TRUNCATE of its table).
func (u *undoLog) truncate(st *KeyState) {
	*u = append(*u, undoEntry{st: st, trunc: st.truncate()})
}

// rollback undoes every change noted, newest first.
func (u *undoLog) rollback() {
	for i := len(*u) - 1; i >= 0; i-- {
		e := (*u)[i]
		if e.trunc != nil {
			e.st.untruncate(e.trunc)
			continue
		}
		e.st.restore(e.key, e.prior)
	}
	clear(*u)
	*u = (*u)[:0]
}

// forget keeps the changes noted (they were handed over): a state on
// disk whose overlay outgrew its budget spills it there now, while no
// change of it is open.
func (u *undoLog) forget() error {
	var err error
	for i, e := range *u {
		if e.st.back.b != nil && (i == 0 || (*u)[i-1].st != e.st) && err == nil {
			err = e.st.spillIfOver()
		}
	}
	clear(*u)
	*u = (*u)[:0]
	return err
}
