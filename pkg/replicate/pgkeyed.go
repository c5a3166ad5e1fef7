package replicate

import (
	"bytes"
	"fmt"
	"strings"
	"unsafe"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/jackc/pglogrepl"

	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// The changes of a relation with a key state (replica identity DEFAULT or
// USING INDEX): each message's old row comes from the state, which follows
// every row the decoder emits. Every check comes before the first row of
// the message is emitted or the state changed, so that a stop (a definite
// error of the collection) leaves both as they were.

// insertKeyed handles an INSERT: the row goes in under its key.
func (d *decoder) insertKeyed(r *relation, tuple *pglogrepl.TupleData) error {
	row, msg, err := d.encodeTuple(r, tuple, "", "INSERT into")
	if err != nil || msg != "" {
		return d.stopMsg(r, msg, err)
	}
	key, err := r.state.keyOf(row)
	if err != nil {
		return err
	}
	_, dup, err := r.state.get(key)
	if err != nil {
		return err
	}
	if dup {
		return d.stop(r, d.duplicateMsg(r, "an INSERT into", tuple))
	}
	if err := d.emitEncoded(r, row, +1); err != nil {
		return err
	}
	d.undo.put(r.state, key, row)
	return nil
}

// updateKeyed handles an UPDATE: old is the old key ('K') when the key
// changed or a key column is stored out of line, the whole old row ('O')
// under REPLICA IDENTITY FULL, else nil (the key is the new row's).
func (d *decoder) updateKeyed(r *relation, old, tuple *pglogrepl.TupleData) error {
	st := r.state
	keyTuple := old
	if keyTuple == nil {
		keyTuple = tuple
	}
	key, msg, err := d.encodeKey(r, keyTuple, "UPDATE of")
	if err != nil || msg != "" {
		return d.stopMsg(r, msg, err)
	}
	prev, ok, err := st.get(key)
	if err != nil {
		return err
	}
	if !ok {
		return d.stop(r, d.missingMsg(r, "an UPDATE of", keyTuple))
	}
	row, msg, err := d.encodeTuple(r, tuple, prev, "UPDATE of")
	if err != nil || msg != "" {
		return d.stopMsg(r, msg, err)
	}
	newKey, err := st.keyOf(row)
	if err != nil {
		return err
	}
	moved := !bytes.Equal(newKey, key)
	if moved {
		_, dup, err := st.get(newKey)
		if err != nil {
			return err
		}
		if dup {
			return d.stop(r, d.duplicateMsg(r, "an UPDATE of", tuple))
		}
	}
	if err := d.emitEncoded(r, bytesOf(prev), -1); err != nil {
		return err
	}
	if err := d.emitEncoded(r, row, +1); err != nil {
		return err
	}
	if moved {
		d.undo.del(st, key)
	}
	d.undo.put(st, newKey, row)
	return nil
}

// deleteKeyed handles a DELETE: old is the old key ('K') or row ('O').
func (d *decoder) deleteKeyed(r *relation, old *pglogrepl.TupleData) error {
	if old == nil {
		return d.stop(r, fmt.Sprintf("a DELETE from %s at %s came without the old row's key (replica identity %s); the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL and re-snapshot it",
			r.table.QualifiedName(), d.txnLSN, r.table.ReplicaIdentity, r.table.QuotedName()))
	}
	key, msg, err := d.encodeKey(r, old, "DELETE from")
	if err != nil || msg != "" {
		return d.stopMsg(r, msg, err)
	}
	prev, ok, err := r.state.get(key)
	if err != nil {
		return err
	}
	if !ok {
		return d.stop(r, d.missingMsg(r, "a DELETE from", old))
	}
	if err := d.emitEncoded(r, bytesOf(prev), -1); err != nil {
		return err
	}
	d.undo.del(r.state, key)
	return nil
}

// stopMsg stops r with msg, unless err (not the collection's fault).
func (d *decoder) stopMsg(r *relation, msg string, err error) error {
	if err != nil {
		return err
	}
	return d.stop(r, msg)
}

// encodeTuple encodes a whole row of r (d.row, valid until the next call).
// Unchanged TOASTed values ('u') come from prev, the row it replaces.
// Problems of the collection come back as msg; err is for the protocol.
func (d *decoder) encodeTuple(r *relation, tuple *pglogrepl.TupleData, prev, what string) (row []byte, msg string, err error) {
	n := len(r.table.Columns)
	if tuple == nil || len(tuple.Columns) != n {
		got := 0
		if tuple != nil {
			got = len(tuple.Columns)
		}
		return nil, "", fmt.Errorf("pgoutput: a row of %s has %d columns, its relation %d", r.table.QualifiedName(), got, n)
	}
	st := r.state
	var prevCols [][]byte
	row = d.row[:0]
	for i, c := range tuple.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeNull:
			row, err = st.pg.AppendText(row, i, c.Data, c.DataType == pglogrepl.TupleDataTypeNull)
			if err != nil {
				return nil, convertMsg(r, d.txnLSN, err, describeTuple(r, tuple)), nil
			}
		case pglogrepl.TupleDataTypeToast:
			if prev == "" {
				return nil, fmt.Sprintf("an %s %s at %s left the TOASTed column %s out as unchanged, but there is no old row; the collection stops here: re-snapshot it",
					what, r.table.QualifiedName(), d.txnLSN, r.table.Columns[i].Name), nil
			}
			if prevCols == nil {
				if prevCols, err = st.split(bytesOf(prev)); err != nil {
					return nil, "", err
				}
			}
			row = append(row, prevCols[i]...)
		default:
			return nil, "", fmt.Errorf("pgoutput: column %s of %s in unexpected format %q", r.table.Columns[i].Name, r.table.QualifiedName(), c.DataType)
		}
	}
	d.row = row
	return row, "", nil
}

// encodeKey encodes the key columns of tuple (d.key, valid until the
// next call).
func (d *decoder) encodeKey(r *relation, tuple *pglogrepl.TupleData, what string) (key []byte, msg string, err error) {
	n := len(r.table.Columns)
	if len(tuple.Columns) != n {
		return nil, "", fmt.Errorf("pgoutput: a row of %s has %d columns, its relation %d", r.table.QualifiedName(), len(tuple.Columns), n)
	}
	st := r.state
	key = d.key[:0]
	for _, i := range st.key {
		c := tuple.Columns[i]
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeNull:
			key, err = st.pg.AppendText(key, i, c.Data, c.DataType == pglogrepl.TupleDataTypeNull)
			if err != nil {
				return nil, fmt.Sprintf("cannot convert the key of a row of %s at %s: %v; the collection stops here", r.table.QualifiedName(), d.txnLSN, err), nil
			}
		default:
			return nil, fmt.Sprintf("an %s %s at %s came without the value of key column %s (format %q); the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL and re-snapshot it",
				what, r.table.QualifiedName(), d.txnLSN, r.table.Columns[i].Name, c.DataType, r.table.QuotedName()), nil
		}
	}
	d.key = key
	return key, "", nil
}

// emitEncoded appends an encoded row with diff to r's builder.
func (d *decoder) emitEncoded(r *relation, row []byte, diff int64) error {
	if err := r.b.AppendEncoded(row); err != nil {
		return fmt.Errorf("replicate %s: %w", r.table.QualifiedName(), err)
	}
	r.diffs = append(r.diffs, diff)
	if !r.pending {
		r.pending = true
		d.dirty = append(d.dirty, r)
	}
	d.pendRow++
	d.pendB += len(row)
	return nil
}

// missingMsg is the definite error of a change whose old key is not in
// the state.
func (d *decoder) missingMsg(r *relation, what string, tuple *pglogrepl.TupleData) string {
	return fmt.Sprintf("%s %s at %s names the row with key %s, which the key state (the rows as replicated, keyed by replica identity %s) does not hold, so its old values are unknown; the collection stops here: re-snapshot it (or run ALTER TABLE %s REPLICA IDENTITY FULL first)",
		what, r.table.QualifiedName(), d.txnLSN, describeKey(r, tuple), strings.ToUpper(r.table.ReplicaIdentity), r.table.QuotedName())
}

// duplicateMsg is the definite error of a change that gives a key a
// second row.
func (d *decoder) duplicateMsg(r *relation, what string, tuple *pglogrepl.TupleData) string {
	return fmt.Sprintf("%s %s at %s gives key %s a second row (a DEFERRABLE primary key or unique index?), and the key state cannot tell the rows apart; the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL and re-snapshot it",
		what, r.table.QualifiedName(), d.txnLSN, describeKey(r, tuple), r.table.QuotedName())
}

// describeKey prints tuple's key as PostgreSQL does: (id, k)=(1, x).
func describeKey(r *relation, tuple *pglogrepl.TupleData) string {
	var names, vals []string
	for _, i := range r.state.key {
		names = append(names, r.table.Columns[i].Name)
		v := "?"
		if i < len(tuple.Columns) {
			switch c := tuple.Columns[i]; c.DataType {
			case pglogrepl.TupleDataTypeText:
				v = string(c.Data)
				if len(v) > 64 {
					v = v[:61] + "..."
				}
			case pglogrepl.TupleDataTypeNull:
				v = "NULL"
			}
		}
		vals = append(vals, v)
	}
	return "(" + strings.Join(names, ", ") + ")=(" + strings.Join(vals, ", ") + ")"
}

// stateChange says how t's columns differ from those st was built for,
// or "" if they do not.
func stateChange(st *KeyState, t *pgarrow.Table) string {
	have := st.Table()
	fields := t.Fields()
	if len(fields) == len(have.Columns) {
		same := true
		for i, c := range t.Columns {
			same = same && c.Name == have.Columns[i].Name
		}
		types := make([]arrow.DataType, len(fields))
		for i, f := range fields {
			types[i] = f.Type
		}
		if same && st.pg.CheckTypes(types) == nil {
			return ""
		}
	}
	return fmt.Sprintf("the columns of %s differ from those its key state was read from the store with", t.QualifiedName())
}

// bytesOf is s as bytes, not to be modified.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// truncateState empties r's key state (for a TRUNCATE of its table),
// noting what to undo, so that a lost connection before the next flush
// brings the rows back. A TRUNCATE that is passed on (rather than
// stopping the collection) must call it: the rows it removed are no
// longer there to retract.
func (d *decoder) truncateState(r *relation) {
	if r.state == nil {
		return
	}
	d.undo.truncate(r.state)
}
