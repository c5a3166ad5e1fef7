package replicate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pglogrepl"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// keyStateFunc returns the key state of a relation's collection (nil:
// none), as PGConfig.KeyState.
type keyStateFunc func(t *pgarrow.Table) (*KeyState, error)

// resolveFunc turns a pgoutput Relation message into a table, looking up
// type names (and NOT NULL) in the catalog.
type resolveFunc func(ctx context.Context, m *pglogrepl.RelationMessage) (*pgarrow.Table, error)

// sinkError is an error returned by the Sink: never retried.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

func sinkErr(err error) error {
	if err == nil {
		return nil
	}
	return &sinkError{err}
}

// relation is what the decoder knows of one relation (by OID).
type relation struct {
	table   *pgarrow.Table
	schema  *arrow.Schema
	b       *pgarrow.RowBuilder
	diffs   []int64
	stopped bool // a definite error was reported: ignore its changes
	pending bool // in decoder.dirty
	// state, when set, holds the collection's current row by key: the
	// old rows of updates and deletes come from it (replica identity
	// DEFAULT or USING INDEX, or FULL after either).
	state *KeyState
	key   []int // the replica identity's columns (the Relation message's flags)
	// restating: a sink re-snapshots the collection and rebuilds its
	// state (StateTaker); its changes meanwhile are held as they came,
	// those since the last flush in rawTxn (pgrestate.go).
	restating   bool
	raw, rawTxn []pgHeld
}

// decoder turns pgoutput messages into Sink calls. It holds no connection:
// its state survives reconnects, so a transaction cut short by a lost
// connection resumes where its emitted part ended.
type decoder struct {
	sink       pipe.Sink
	mem        memory.Allocator
	resolve    resolveFunc
	expect     func(collection string) *arrow.Schema
	limit      func(raw frontier.LSN) (frontier.LSN, error)
	keyState   keyStateFunc
	flushRows  int
	flushBytes int
	stopAt     frontier.LSN

	rels    map[uint32]*relation
	stopped map[string]bool // collections with a definite error
	dirty   []*relation     // relations with rows in their builders
	// undo takes the key states back to what was emitted: the changes
	// made since the last flush, in order (interrupted drops those rows).
	undo undoLog
	// holding are the relations being restated.
	holding []*relation
	row     []byte // scratch: an encoded row
	key     []byte // scratch: an encoded key

	upper frontier.LSN // last progress reported
	// resume is where a new connection starts: everything before it has
	// been handed over. It is ahead of upper while the limit holds
	// progress back; starting at upper then would have the server send
	// transactions already handed over again.
	resume frontier.LSN

	inTxn   bool
	txnLSN  frontier.LSN // commit LSN of the open transaction
	seen    int          // DML messages of the open transaction handled
	emitted int          // of which handed to the sink
	pendRow int
	pendB   int

	// After a reconnect in the middle of a transaction: skip the first
	// skipN DML messages of the transaction at skipLSN (already emitted).
	skipLSN frontier.LSN
	skipN   int
	skip    int

	done bool // StopAt reached
}

func newDecoder(sink pipe.Sink, mem memory.Allocator, resolve resolveFunc, keyState keyStateFunc, flushRows, flushBytes int, stopAt frontier.LSN) *decoder {
	return &decoder{sink: sink, mem: mem, resolve: resolve, keyState: keyState, flushRows: flushRows, flushBytes: flushBytes, stopAt: stopAt,
		rels: map[uint32]*relation{}, stopped: map[string]bool{}}
}

// progress reports upper if it is beyond the last one, and notes when
// StopAt has been passed.
func (d *decoder) progress(upper frontier.LSN) error {
	d.resume = max(d.resume, upper)
	if d.limit != nil {
		lim, err := d.limit(upper)
		if err != nil {
			return sinkErr(err)
		}
		upper = min(upper, lim)
	}
	if err := d.takeStates(); err != nil {
		return err
	}
	if upper <= d.upper {
		return nil
	}
	d.upper = upper
	if err := sinkErr(d.sink.Progress("", frontier.Single(frontier.DomainLSN, uint64(upper)))); err != nil {
		return err
	}
	if d.stopAt != 0 && upper > d.stopAt {
		d.done = true
	}
	return nil
}

// keepalive handles the server's WAL end position from a keepalive: with
// no transaction open, everything before it has been sent.
func (d *decoder) keepalive(walEnd frontier.LSN) error {
	if d.inTxn || d.done {
		return nil
	}
	return d.progress(walEnd)
}

// interrupted is called when the connection is lost: unflushed rows are
// dropped (and the key states taken back to what was emitted), and the
// part of the open transaction that was emitted will be skipped when the
// server sends it again.
func (d *decoder) interrupted() {
	d.undo.rollback()
	for _, r := range d.holding {
		r.rawTxn = nil // sent again
	}
	for _, r := range d.dirty {
		for _, a := range r.b.NewArrays() {
			a.Release()
		}
		r.diffs = r.diffs[:0]
		r.pending = false
	}
	d.dirty = d.dirty[:0]
	d.pendRow, d.pendB = 0, 0
	if d.inTxn {
		if d.txnLSN == d.skipLSN && d.skip > 0 {
			// Interrupted again while still skipping: keep the old count.
			d.skipN = max(d.skipN, d.emitted)
		} else {
			d.skipLSN, d.skipN = d.txnLSN, d.emitted
		}
	}
	d.inTxn = false
}

// handle processes one pgoutput message.
func (d *decoder) handle(ctx context.Context, m pglogrepl.Message) error {
	if d.done {
		return nil
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		if d.inTxn {
			return fmt.Errorf("pgoutput: BEGIN of %s inside the transaction of %s", frontier.LSN(m.FinalLSN), d.txnLSN)
		}
		lsn := frontier.LSN(m.FinalLSN)
		if d.stopAt != 0 && lsn > d.stopAt {
			// Every commit at or below StopAt has been emitted.
			if err := d.progress(lsn); err != nil {
				return err
			}
			d.done = true
			return nil
		}
		d.inTxn, d.txnLSN, d.seen, d.emitted = true, lsn, 0, 0
		d.skip = 0
		if lsn == d.skipLSN {
			d.skip = d.skipN
		}
		return nil
	case *pglogrepl.CommitMessage:
		if !d.inTxn {
			return fmt.Errorf("pgoutput: COMMIT at %s outside a transaction", frontier.LSN(m.CommitLSN))
		}
		if err := d.flush(); err != nil {
			return err
		}
		d.inTxn = false
		d.skipLSN, d.skipN, d.skip = 0, 0, 0
		return d.progress(frontier.LSN(m.TransactionEndLSN))
	case *pglogrepl.RelationMessage:
		return d.relation(ctx, m)
	case *pglogrepl.InsertMessage:
		return d.dml(m.RelationID, func(r *relation) error {
			if r.restating {
				return d.hold(r, 'I', nil, m.Tuple)
			}
			if r.state != nil {
				return d.insertKeyed(r, m.Tuple)
			}
			return d.appendTuple(r, m.Tuple, nil, +1)
		})
	case *pglogrepl.UpdateMessage:
		return d.dml(m.RelationID, func(r *relation) error {
			if r.restating {
				return d.hold(r, 'U', m.OldTuple, m.NewTuple)
			}
			if r.state != nil {
				return d.updateKeyed(r, m.OldTuple, m.NewTuple)
			}
			if m.OldTuple == nil || m.OldTupleType != pglogrepl.UpdateMessageTupleTypeOld {
				return d.stop(r, fmt.Sprintf("an UPDATE of %s at %s came without the old row (replica identity %s); the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL and re-snapshot it",
					r.table.QualifiedName(), d.txnLSN, r.table.ReplicaIdentity, r.table.QuotedName()))
			}
			if err := d.appendTuple(r, m.OldTuple, nil, -1); err != nil || r.stopped {
				return err
			}
			return d.appendTuple(r, m.NewTuple, m.OldTuple, +1)
		})
	case *pglogrepl.DeleteMessage:
		return d.dml(m.RelationID, func(r *relation) error {
			if r.restating {
				return d.hold(r, 'D', m.OldTuple, nil)
			}
			if r.state != nil {
				return d.deleteKeyed(r, m.OldTuple)
			}
			if m.OldTuple == nil || m.OldTupleType != pglogrepl.DeleteMessageTupleTypeOld {
				return d.stop(r, fmt.Sprintf("a DELETE from %s at %s came without the old row (replica identity %s); the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL and re-snapshot it",
					r.table.QualifiedName(), d.txnLSN, r.table.ReplicaIdentity, r.table.QuotedName()))
			}
			return d.appendTuple(r, m.OldTuple, nil, -1)
		})
	case *pglogrepl.TruncateMessage:
		// A TRUNCATE is one message for all its relations: skip it as one.
		// Each relation is reset at the transaction's time: what the
		// transaction wrote to it before is handed over first, so the
		// reset supersedes it, and what it writes after is the new content.
		return d.dml(0, func(*relation) error {
			if err := d.flush(); err != nil {
				return err
			}
			for _, id := range m.RelationIDs {
				r := d.rels[id]
				if r == nil || r.stopped {
					continue
				}
				d.truncateState(r)
				if err := sinkErr(d.sink.Reset(r.table.QualifiedName(), frontier.Time{Pos: uint64(d.txnLSN)}, nil)); err != nil {
					return err
				}
				if r.restating {
					// The sink gave up the re-snapshot for the reset: the
					// table is empty, and so is its state.
					d.unhold(r)
					st, err := NewKeyState(r.table, r.keyNames())
					if err != nil {
						return err
					}
					r.state = st
				}
			}
			// The resets are handed over: a reconnect does not repeat them.
			return d.flush()
		})
	case *pglogrepl.TypeMessage, *pglogrepl.OriginMessage, *pglogrepl.LogicalDecodingMessage:
		return nil
	}
	return fmt.Errorf("pgoutput: unexpected message %T", m)
}

// dml runs fn for one data message of relation id (0: several), unless the
// message belongs to the emitted part of a resumed transaction.
func (d *decoder) dml(id uint32, fn func(*relation) error) error {
	if !d.inTxn {
		return fmt.Errorf("pgoutput: data message outside a transaction")
	}
	d.seen++
	if d.skip > 0 {
		d.skip--
		d.emitted = d.seen
		return nil
	}
	var r *relation
	if id != 0 {
		r = d.rels[id]
		if r == nil {
			return fmt.Errorf("pgoutput: change of relation %d before its RELATION message", id)
		}
		if r.stopped {
			return nil
		}
	}
	if err := fn(r); err != nil {
		return err
	}
	if d.pendRow >= d.flushRows || d.pendB >= d.flushBytes {
		return d.flush()
	}
	return nil
}

// stop reports a definite error of r's collection and ignores it from now on.
func (d *decoder) stop(r *relation, msg string) error {
	// Hand over what the transaction has so far, so emitted stays a prefix.
	if err := d.flush(); err != nil {
		return err
	}
	r.stopped = true
	name := r.table.QualifiedName()
	if d.stopped[name] {
		return nil
	}
	d.stopped[name] = true
	at := d.txnLSN
	if !d.inTxn {
		at = d.upper
	}
	return sinkErr(d.sink.Error(name, frontier.Time{Pos: uint64(at)}, msg))
}

// relation handles a Relation message: the first one of a relation
// introduces it; a later one that changes its columns or replica identity
// stops it.
func (d *decoder) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	old := d.rels[m.RelationID]
	name := pgarrow.CollectionName(m.Namespace, m.RelationName)
	if old != nil && (old.stopped || d.stopped[name]) {
		return nil
	}
	cols := make([]pgarrow.Column, len(m.Columns))
	for i, c := range m.Columns {
		cols[i] = pgarrow.Column{Name: c.Name, TypeOID: c.DataType, TypeMod: c.TypeModifier}
	}
	ident := pgarrow.ReplicaIdentityName(m.ReplicaIdentity)
	var key []int // the replica identity's columns
	for i, c := range m.Columns {
		if c.Flags&1 != 0 {
			key = append(key, i)
		}
	}
	var t *pgarrow.Table
	taken := false     // a sink re-snapshots the collection from this change on
	restating := false // and rebuilds its key state from the copy
	if old != nil {
		if change := describeChange(old.table, cols, name); change != "" {
			// Columns changed (not a rename): a sink may re-snapshot the
			// collection from here on; the relation goes on with them.
			var err error
			keyed := old.state != nil || old.restating
			if old.table.QualifiedName() == name && (!keyed || d.canRestate()) {
				if t, err = d.resolve(ctx, m); err != nil {
					return fmt.Errorf("resolve relation %s: %w", name, err)
				}
				if taken, err = d.takeOver(t, change); err != nil {
					return err
				}
				restating = taken && keyed
			}
			if old.restating {
				d.unhold(old) // in the old columns, and before the new copy
			}
			if !taken {
				return d.stop(old, fmt.Sprintf("%s at %s; the collection stops here: re-snapshot it", change, d.at()))
			}
			if old.b != nil {
				old.b.Release()
				old.b = nil
			}
			old = nil // not a rename
		} else if old.table.QualifiedName() == name && old.table.ReplicaIdentity == ident && slices.Equal(old.key, key) {
			return nil // the same relation again (a new session, or a harmless ALTER)
		}
	}
	if d.stopped[name] {
		return nil
	}
	var err error
	if t == nil {
		if t, err = d.resolve(ctx, m); err != nil {
			return fmt.Errorf("resolve relation %s: %w", name, err)
		}
	}
	r := &relation{table: t, key: key}
	d.rels[m.RelationID] = r
	if old == nil && !taken && d.expect != nil {
		if exp := d.expect(name); exp != nil {
			diff := arrowutil.FieldsChange(exp.Fields(), t.Fields())
			if diff == "" {
				// The columns the store has. A Relation message does not say
				// which are NOT NULL: when the catalog has changed since the
				// message's WAL (a type changed while the stream was behind),
				// t comes from the message alone, and the store knows better.
				t = withNullability(t, exp)
				r.table = t
			}
			if diff != "" {
				change := fmt.Sprintf("the columns of %s changed while it was not followed (%s)", name, diff)
				if keyed := ident != "full"; !keyed || d.canRestate() {
					// A keyed table's state comes from the copy, as for a
					// change seen in the stream.
					if taken, err = d.takeOver(t, change); err != nil {
						return err
					}
					restating = taken && keyed
				}
				if !taken {
					return d.stop(r, fmt.Sprintf("%s, seen at %s; the collection stops here: re-snapshot it", change, d.at()))
				}
			}
		}
	}
	if ident != "full" && len(key) == 0 {
		why, fix := ", and it has no primary key", "give it a primary key"
		if ident == "nothing" {
			why, fix = "", "give it a primary key and REPLICA IDENTITY DEFAULT"
		}
		return d.stop(r, fmt.Sprintf("replica identity of %s is %s at %s%s, so updates and deletes do not say which row they change; the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL (or %s) and re-snapshot it",
			name, strings.ToUpper(ident), d.at(), why, t.QuotedName(), fix))
	}
	if restating {
		// Held until the sink hands over the state of its copy.
		d.restate(r)
	} else {
		if d.keyState != nil {
			if r.state, err = d.keyState(t); err != nil {
				return sinkErr(err)
			}
		}
		if ident != "full" && r.state == nil {
			return d.stop(r, fmt.Sprintf("replica identity of %s is %s at %s, so updates and deletes lack the old row, and this stream keeps no rows by key (rtrctl ingest does); the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL and re-snapshot it, or ingest it with rtrctl ingest",
				name, strings.ToUpper(ident), d.at(), t.QuotedName()))
		}
		if r.state != nil {
			if change := stateChange(r.state, t); change != "" {
				return d.stop(r, fmt.Sprintf("%s at %s; the collection stops here: re-snapshot it", change, d.at()))
			}
			if ident != "full" {
				// Keyed by the identity's columns from now on. The undo log
				// is emptied first: it holds keys of the old key columns.
				if err := d.flush(); err != nil {
					return err
				}
				if err := r.state.setKey(key); errors.Is(err, errStateRead) {
					return err // the state's disk: not the collection's fault
				} else if err != nil {
					return d.stop(r, fmt.Sprintf("the replica identity of %s changed at %s, and its rows cannot be keyed by the new key: %v; the collection stops here: re-snapshot it", name, d.at(), err))
				}
			}
		}
	}
	if old != nil {
		// Renamed (same columns): a new collection name.
		old.stopped = true
	}
	if r.b, err = pgarrow.NewRowBuilder(d.mem, t); err != nil {
		return fmt.Errorf("relation %s: %w", name, err)
	}
	r.schema = pipe.DataSchema(t.Fields(), frontier.DomainLSN, arrow.Metadata{})
	if rs, ok := d.sink.(RelationSink); ok {
		return sinkErr(rs.Relation(t))
	}
	return nil
}

// takeOver offers a change of t's columns at the current transaction to
// a RelationChanger sink, after handing over what came before it.
func (d *decoder) takeOver(t *pgarrow.Table, change string) (bool, error) {
	rc, ok := d.sink.(RelationChanger)
	if !ok {
		return false, nil
	}
	if err := d.flush(); err != nil {
		return false, err
	}
	ok, err := rc.RelationChanged(t, d.at(), change)
	return ok, sinkErr(err)
}

func (d *decoder) at() frontier.LSN {
	if d.inTxn {
		return d.txnLSN
	}
	return d.upper
}

// describeChange says how cols differ from t's columns, or "" if they do
// not (names, types and type modifiers), or if only the name changed.
func describeChange(t *pgarrow.Table, cols []pgarrow.Column, name string) string {
	if t.QualifiedName() != name {
		// ALTER TABLE ... RENAME (or SET SCHEMA): the collection name changes.
		return fmt.Sprintf("%s was renamed to %s", t.QualifiedName(), name)
	}
	oldBy := map[string]pgarrow.Column{}
	for _, c := range t.Columns {
		oldBy[c.Name] = c
	}
	newBy := map[string]pgarrow.Column{}
	for _, c := range cols {
		newBy[c.Name] = c
	}
	var parts []string
	for _, c := range t.Columns {
		if _, ok := newBy[c.Name]; !ok {
			parts = append(parts, fmt.Sprintf("column %s dropped from %s", c.Name, name))
		}
	}
	for _, c := range cols {
		o, ok := oldBy[c.Name]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("column %s added to %s", c.Name, name))
		case o.TypeOID != c.TypeOID || o.TypeMod != c.TypeMod:
			parts = append(parts, fmt.Sprintf("column %s of %s changed type from %s (oid %d, typmod %d) to oid %d, typmod %d",
				c.Name, name, o.TypeName, o.TypeOID, o.TypeMod, c.TypeOID, c.TypeMod))
		}
	}
	if len(parts) == 0 && len(cols) == len(t.Columns) {
		for i := range cols {
			if cols[i].Name != t.Columns[i].Name {
				parts = append(parts, fmt.Sprintf("columns of %s reordered", name))
				break
			}
		}
	}
	return strings.Join(parts, ", ")
}

// appendTuple appends tuple with diff to r's builder. Unchanged TOASTed
// columns ('u') are filled from old.
func (d *decoder) appendTuple(r *relation, tuple, old *pglogrepl.TupleData, diff int64) error {
	n := len(r.table.Columns)
	if tuple == nil || len(tuple.Columns) != n {
		got := 0
		if tuple != nil {
			got = len(tuple.Columns)
		}
		return fmt.Errorf("pgoutput: a row of %s has %d columns, its relation %d", r.table.QualifiedName(), got, n)
	}
	vals, nulls, toast, bad := tupleTexts(tuple)
	if bad >= 0 {
		return fmt.Errorf("pgoutput: column %s of %s in unexpected format %q", r.table.Columns[bad].Name, r.table.QualifiedName(), tuple.Columns[bad].DataType)
	}
	for _, i := range toast {
		if old == nil || old.Columns[i].DataType != pglogrepl.TupleDataTypeText {
			return d.stop(r, fmt.Sprintf("an unchanged TOASTed value of column %s of %s at %s came without its old value; the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL and re-snapshot it",
				r.table.Columns[i].Name, r.table.QualifiedName(), d.txnLSN, r.table.QuotedName()))
		}
		vals[i] = old.Columns[i].Data
	}
	size := 0
	for _, v := range vals {
		size += len(v)
	}
	if err := r.b.AppendText(vals, nulls); err != nil {
		return d.stop(r, convertMsg(r, d.txnLSN, err, pgarrow.DescribeRow(r.table, r.key, vals, nulls)))
	}
	r.diffs = append(r.diffs, diff)
	if !r.pending {
		r.pending = true
		d.dirty = append(d.dirty, r)
	}
	d.pendRow++
	d.pendB += size
	return nil
}

// flush hands every pending row to the sink.
func (d *decoder) flush() error {
	for _, r := range d.dirty {
		if err := d.flushRel(r); err != nil {
			return err
		}
	}
	d.dirty = d.dirty[:0]
	d.pendRow, d.pendB = 0, 0
	d.emitted = d.seen
	for _, r := range d.holding {
		// Handed over too: skipped when the server sends it again.
		r.raw, r.rawTxn = append(r.raw, r.rawTxn...), nil
	}
	return d.undo.forget()
}

func (d *decoder) flushRel(r *relation) error {
	r.pending = false
	n := r.b.Len()
	cols := r.b.NewArrays()
	defer func() {
		for _, a := range cols {
			a.Release()
		}
	}()
	if n == 0 {
		r.diffs = r.diffs[:0]
		return nil
	}
	tb := array.NewUint64Builder(d.mem)
	defer tb.Release()
	tb.Reserve(n)
	for i := 0; i < n; i++ {
		tb.UnsafeAppend(uint64(d.txnLSN))
	}
	db := array.NewInt64Builder(d.mem)
	defer db.Release()
	db.AppendValues(r.diffs, nil)
	r.diffs = r.diffs[:0]
	ta, da := tb.NewArray(), db.NewArray()
	defer ta.Release()
	defer da.Release()
	rec := array.NewRecord(r.schema, append(cols[:len(cols):len(cols)], ta, da), int64(n))
	defer rec.Release()
	return sinkErr(d.sink.Data(r.table.QualifiedName(), rec))
}

// release frees the builders.
func (d *decoder) release() {
	for _, r := range d.rels {
		if r.b != nil {
			r.b.Release()
		}
	}
}

// convertPrefix begins the definite error of a row that does not convert.
const convertPrefix = "cannot convert a row of "

// IsConversionError says whether msg, a definite error handed to a Sink,
// is that of a row whose value does not convert (docs/types-postgres.md),
// rather than of a change to the collection.
func IsConversionError(msg string) bool { return strings.HasPrefix(msg, convertPrefix) }

// convertMsg is the definite error of a row of r, named by row (see
// pgarrow.DescribeRow), that does not convert at lsn.
func convertMsg(r *relation, lsn frontier.LSN, err error, row string) string {
	return fmt.Sprintf(convertPrefix+"%s at %s: %v; %s; the collection stops here: change the value upstream or the column's type (docs/types-postgres.md says what each type holds), then re-snapshot it",
		r.table.QualifiedName(), lsn, err, row)
}

// tupleTexts splits a pgoutput row into its columns' text forms and
// nulls. Unchanged TOASTed values are left nil and listed in toast; bad is
// the first column in another format, -1 when there is none.
func tupleTexts(tuple *pglogrepl.TupleData) (vals [][]byte, nulls []bool, toast []int, bad int) {
	vals, nulls, bad = make([][]byte, len(tuple.Columns)), make([]bool, len(tuple.Columns)), -1
	for i, c := range tuple.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeText:
			vals[i] = c.Data
		case pglogrepl.TupleDataTypeNull:
			nulls[i] = true
		case pglogrepl.TupleDataTypeToast:
			toast = append(toast, i)
		default:
			if bad < 0 {
				bad = i
			}
		}
	}
	return vals, nulls, toast, bad
}

// describeTuple names a pgoutput row of r by its replica identity key.
func describeTuple(r *relation, tuple *pglogrepl.TupleData) string {
	vals, nulls, toast, _ := tupleTexts(tuple)
	for _, i := range toast {
		vals[i] = []byte("(unchanged)")
	}
	return pgarrow.DescribeRow(r.table, r.key, vals, nulls)
}

// withNullability is t with the NOT NULL of each column taken from the
// same column of schema (their columns match by name and type).
func withNullability(t *pgarrow.Table, schema *arrow.Schema) *pgarrow.Table {
	same := true
	for i, c := range t.Columns {
		same = same && c.NotNull == !schema.Field(i).Nullable
	}
	if same {
		return t
	}
	tt := *t
	tt.Columns = slices.Clone(t.Columns)
	for i := range tt.Columns {
		tt.Columns[i].NotNull = !schema.Field(i).Nullable
	}
	return &tt
}
