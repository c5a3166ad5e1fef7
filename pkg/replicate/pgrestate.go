package replicate

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/jackc/pglogrepl"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// A relation with a key state whose columns change is re-snapshotted by a
// StateTaker sink: its changes from the change on are held as pgoutput
// sent them (copied: pgoutput's buffers are reused) until the sink hands
// over the state read from the copy, then those the copy lacks go
// through it (StateTaker).

// pgHeld is a data message held while its relation's state is rebuilt.
type pgHeld struct {
	lsn      frontier.LSN // the transaction's commit LSN
	kind     byte         // 'I', 'U', 'D'
	old, new *pglogrepl.TupleData
}

// copyTuple is a deep copy of t.
func copyTuple(t *pglogrepl.TupleData) *pglogrepl.TupleData {
	if t == nil {
		return nil
	}
	c := &pglogrepl.TupleData{ColumnNum: t.ColumnNum, Columns: make([]*pglogrepl.TupleDataColumn, len(t.Columns))}
	for i, col := range t.Columns {
		cc := *col
		cc.Data = append([]byte(nil), col.Data...)
		c.Columns[i] = &cc
	}
	return c
}

// hold keeps a data message of r, a relation being restated.
func (d *decoder) hold(r *relation, kind byte, old, new *pglogrepl.TupleData) error {
	r.rawTxn = append(r.rawTxn, pgHeld{lsn: d.txnLSN, kind: kind, old: copyTuple(old), new: copyTuple(new)})
	return nil
}

// keyNames lists r's key columns.
func (r *relation) keyNames() []string {
	var names []string
	for _, i := range r.key {
		names = append(names, r.table.Columns[i].Name)
	}
	return names
}

// canRestate reports whether the sink rebuilds key states (StateTaker).
func (d *decoder) canRestate() bool {
	_, ok := d.sink.(StateTaker)
	return ok
}

// restate makes r, whose re-snapshot the sink took at the current
// transaction, hold its changes until the sink hands over its state.
func (d *decoder) restate(r *relation) {
	d.sink.(StateTaker).Restate(r.table.QualifiedName(), r.keyNames())
	r.restating, r.state = true, nil
	d.holding = append(d.holding, r)
}

// unhold forgets r's held changes.
func (d *decoder) unhold(r *relation) {
	r.restating, r.raw, r.rawTxn = false, nil, nil
	for i, x := range d.holding {
		if x == r {
			d.holding = append(d.holding[:i], d.holding[i+1:]...)
			break
		}
	}
}

// takeStates hands over the held changes of the relations whose states
// the sink rebuilt, before the progress it allows is reported.
func (d *decoder) takeStates() error {
	if len(d.holding) == 0 {
		return nil
	}
	taker := d.sink.(StateTaker)
	for _, r := range append([]*relation(nil), d.holding...) {
		st, from, done := taker.TakeState(r.table.QualifiedName())
		if !done {
			continue
		}
		raw := r.raw
		d.unhold(r)
		if st == nil {
			// The re-snapshot failed: the sink gave the collection its error.
			r.stopped = true
			d.stopped[r.table.QualifiedName()] = true
			continue
		}
		if change := stateChange(st, r.table); change != "" {
			return fmt.Errorf("restate %s: %s", r.table.QualifiedName(), change)
		}
		if err := st.setKey(r.key); err != nil {
			return fmt.Errorf("restate %s: %w", r.table.QualifiedName(), err)
		}
		// From here on in the copy's description, the one the sink reset
		// the collection with: the same columns, and its NOT NULLs read
		// from the catalog after the change (the stream's may be older).
		t := *st.Table()
		t.OID, t.ReplicaIdentity = r.table.OID, r.table.ReplicaIdentity
		b, err := pgarrow.NewRowBuilder(d.mem, &t)
		if err != nil {
			return fmt.Errorf("restate %s: %w", r.table.QualifiedName(), err)
		}
		r.b.Release()
		r.table, r.b = &t, b
		r.schema = pipe.DataSchema(t.Fields(), frontier.DomainLSN, arrow.Metadata{})
		r.state = st
		if err := d.replay(r, raw, from); err != nil {
			return err
		}
	}
	return nil
}

// replay hands over the held changes of r from is not beyond, through
// its new state, each at its own commit LSN.
func (d *decoder) replay(r *relation, raw []pgHeld, from frontier.Frontier) error {
	inTxn, txnLSN := d.inTxn, d.txnLSN
	defer func() { d.inTxn, d.txnLSN = inTxn, txnLSN }()
	d.inTxn = true
	for _, h := range raw {
		if r.stopped {
			break
		}
		if from.Beyond(frontier.Time{Pos: uint64(h.lsn)}) {
			continue // in the copy
		}
		if h.lsn != d.txnLSN {
			if err := d.flush(); err != nil {
				return err
			}
			d.txnLSN = h.lsn
		}
		var err error
		switch h.kind {
		case 'I':
			err = d.insertKeyed(r, h.new)
		case 'U':
			err = d.updateKeyed(r, h.old, h.new)
		default:
			err = d.deleteKeyed(r, h.old)
		}
		if err != nil {
			return err
		}
	}
	return d.flush()
}
