package replicate

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
)

// The changes of a MySQL or MariaDB table with a key state: a row event
// whose images are not FULL (binlog_row_image MINIMAL or NOBLOB for the
// session that wrote it) carries the primary key of the old row (MINIMAL)
// or leaves unchanged BLOB and TEXT columns out (NOBLOB), and only the
// columns an INSERT or UPDATE set in the new one (MINIMAL). The state
// (KeyState, keyed by the primary key) holds the current row of every
// key, so the old row is retracted exactly and the new one completed
// from it; a column an INSERT leaves out gets its default. Once a table
// has a state, all its events go through it (FULL ones too), so that it
// follows every row the stream emits. Every check of a row comes before
// its updates are emitted or the state changed, so that a stop (a
// definite error of the collection) leaves both as they were.

// notFull reports whether an event's images leave columns out.
func notFull(ev *replication.RowsEvent) bool {
	for _, sk := range ev.SkippedColumns {
		if len(sk) > 0 {
			return true
		}
	}
	return false
}

// imageName says what an event's images were written under.
func imageName(ev *replication.RowsEvent) string {
	if !notFull(ev) {
		return "FULL"
	}
	return "MINIMAL or NOBLOB"
}

// keyedFix is the fix every definite error of this file names, with
// other ways to it (or).
func keyedFix(name string, or ...string) string {
	alt := ""
	for _, o := range or {
		alt += " or " + o
	}
	return fmt.Sprintf("run SET GLOBAL binlog_row_image = 'FULL' (and reconnect the sessions that write the table: they keep their own setting)%s, then re-snapshot it (rtrctl ingest --resnapshot %s)", alt, name)
}

// keyState gives mt a key state for events that are not FULL: false
// when the collection stopped instead.
func (s *myStreamer) keyState(mt *myTable, ev *replication.RowsEvent) (bool, error) {
	name := mt.t.QualifiedName()
	if len(mt.t.PrimaryKey) == 0 {
		return false, s.fail(mt, fmt.Sprintf("a change of %s at %s does not carry every column (binlog_row_image is %s for the session that made it), and the table has no primary key to look its old row up by; the collection stops here: %s",
			name, s.txnGTID, imageName(ev), keyedFix(name, fmt.Sprintf("give it a primary key (ALTER TABLE %s ADD PRIMARY KEY (...))", mt.t.SQL()))))
	}
	if s.cfg.KeyState == nil {
		return false, s.fail(mt, fmt.Sprintf("a change of %s at %s does not carry every column (binlog_row_image is %s for the session that made it), and this stream keeps no rows by key (rtrctl ingest does); the collection stops here: %s",
			name, s.txnGTID, imageName(ev), keyedFix(name)))
	}
	st, err := s.cfg.KeyState(mt.t)
	if err != nil {
		return false, sinkErr(err)
	}
	if st == nil {
		return false, s.fail(mt, fmt.Sprintf("a change of %s at %s does not carry every column (binlog_row_image is %s for the session that made it), and its rows by key are not known; the collection stops here: %s",
			name, s.txnGTID, imageName(ev), keyedFix(name)))
	}
	if !fits(st, mt.t) {
		return false, s.fail(mt, fmt.Sprintf("the columns of %s at %s differ from those its key state was read with; the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)", name, s.txnGTID, name))
	}
	mt.state = st
	return true, nil
}

// startState is t's state in cfg.States, if it fits t.
func (s *myStreamer) startState(t *myarrow.Table) *KeyState {
	st := s.cfg.States[t.QualifiedName()]
	if st == nil || !fits(st, t) {
		return nil
	}
	return st
}

// fits reports whether st holds rows of t's columns keyed by its
// primary key.
func fits(st *KeyState, t *myarrow.Table) bool {
	types := make([]arrow.DataType, len(t.Columns))
	for i, c := range t.Columns {
		types[i] = c.Type
	}
	return st.codec.CheckTypes(types) == nil && sameKey(st, t)
}

// sameKey reports whether st is keyed by t's primary key.
func sameKey(st *KeyState, t *myarrow.Table) bool {
	if len(st.key) != len(t.PrimaryKey) {
		return false
	}
	for _, i := range t.PrimaryKey {
		if !containsInt(st.key, i) || st.names[i] != t.Columns[i].Name {
			return false
		}
	}
	return true
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// rowsKeyed converts the rows of ev through mt's key state.
func (s *myStreamer) rowsKeyed(mt *myTable, ev *replication.RowsEvent) error {
	st := mt.state
	step := 1
	if ev.Type() == replication.EnumRowsEventTypeUpdate {
		step = 2
	}
	for i := 0; i+step <= len(ev.Rows); i += step {
		s.emittedTxn += step
		if s.skip > 0 && s.emittedTxn <= s.skip {
			continue // handed before the connection was lost
		}
		var msg string
		var err error
		switch ev.Type() {
		case replication.EnumRowsEventTypeInsert:
			msg, err = s.insertKeyed(mt, st, ev, i)
		case replication.EnumRowsEventTypeDelete:
			msg, err = s.deleteKeyed(mt, st, ev, i)
		default:
			msg, err = s.updateKeyed(mt, st, ev, i)
		}
		if err != nil {
			return err
		}
		if msg != "" {
			return s.fail(mt, msg)
		}
		if mt.rb.Rows() >= s.cfg.FlushRows {
			if err := s.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// skipped is the columns image i of ev leaves out.
func skipped(ev *replication.RowsEvent, i int) []int {
	if i < len(ev.SkippedColumns) {
		return ev.SkippedColumns[i]
	}
	return nil
}

// encodeImage encodes image i of ev as a whole row (s.row, valid until
// the next call): the columns it leaves out come from prev (the row it
// replaces) or, without one, are their defaults (an INSERT). A problem of
// the collection comes back as msg.
func (s *myStreamer) encodeImage(mt *myTable, st *KeyState, ev *replication.RowsEvent, i int, prev string, what string) (row []byte, msg string) {
	vals, skips := ev.Rows[i], skipped(ev, i)
	if len(vals) != len(mt.t.Columns) {
		return nil, fmt.Sprintf("a row of %s at %s has %d values, the table %d columns; the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)", mt.t.QualifiedName(), s.txnGTID, len(vals), len(mt.t.Columns), mt.t.QualifiedName())
	}
	var prevCols [][]byte
	if prev != "" && len(skips) > 0 {
		var err error
		if prevCols, err = st.split(bytesOf(prev)); err != nil {
			return nil, err.Error()
		}
		prevCols = append([][]byte(nil), prevCols...) // st.split's scratch is reused by keyOf
	}
	row = s.row[:0]
	k := 0
	for c := range vals {
		var err error
		switch {
		case k < len(skips) && skips[k] == c:
			k++
			if prevCols != nil {
				row = append(row, prevCols[c]...)
				continue
			}
			var v any
			if v, err = mt.t.Columns[c].DefaultValue(); err == nil {
				row, err = st.my.AppendValue(row, c, v)
			}
			if err != nil {
				return nil, fmt.Sprintf("%s %s at %s leaves column %s out (binlog_row_image is %s for the session that made it), and its value is not known: %v; the collection stops here: %s",
					what, mt.t.QualifiedName(), s.txnGTID, mt.t.Columns[c].Name, imageName(ev), err, keyedFix(mt.t.QualifiedName()))
			}
		default:
			if row, err = st.my.AppendBinlog(row, c, vals[c]); err != nil {
				return nil, fmt.Sprintf("cannot convert a row of %s at %s: %v", mt.t.QualifiedName(), s.txnGTID, err)
			}
		}
	}
	s.row = row
	return row, ""
}

// encodeKey encodes the primary key of image i of ev (s.key, valid until
// the next call).
func (s *myStreamer) encodeKey(mt *myTable, st *KeyState, ev *replication.RowsEvent, i int, what string) (key []byte, msg string) {
	vals, skips := ev.Rows[i], skipped(ev, i)
	key = s.key[:0]
	for _, c := range st.key {
		if containsInt(skips, c) || c >= len(vals) {
			return nil, fmt.Sprintf("%s %s at %s came without the value of key column %s; the collection stops here: %s", what, mt.t.QualifiedName(), s.txnGTID, mt.t.Columns[c].Name, keyedFix(mt.t.QualifiedName()))
		}
		var err error
		if key, err = st.my.AppendBinlog(key, c, vals[c]); err != nil {
			return nil, fmt.Sprintf("cannot convert the key of a row of %s at %s: %v", mt.t.QualifiedName(), s.txnGTID, err)
		}
	}
	s.key = key
	return key, ""
}

// insertKeyed: the row goes in under its key.
func (s *myStreamer) insertKeyed(mt *myTable, st *KeyState, ev *replication.RowsEvent, i int) (string, error) {
	row, msg := s.encodeImage(mt, st, ev, i, "", "an INSERT into")
	if msg != "" {
		return msg, nil
	}
	key, err := st.keyOf(row)
	if err != nil {
		return "", err
	}
	_, dup, err := st.get(key)
	if err != nil {
		return "", err
	}
	if dup {
		return s.duplicateMsg(mt, st, ev.Rows[i], "an INSERT into"), nil
	}
	if err := mt.rb.AppendEncoded(row, s.txn.Pos, +1, s.txn.Partition); err != nil {
		return "", fmt.Errorf("replicate %s: %w", mt.t.QualifiedName(), err)
	}
	s.undo.put(st, key, row)
	return "", nil
}

// deleteKeyed: the key's row is retracted.
func (s *myStreamer) deleteKeyed(mt *myTable, st *KeyState, ev *replication.RowsEvent, i int) (string, error) {
	key, msg := s.encodeKey(mt, st, ev, i, "a DELETE from")
	if msg != "" {
		return msg, nil
	}
	prev, ok, err := st.get(key)
	if err != nil {
		return "", err
	}
	if !ok {
		return s.missingMsg(mt, st, ev.Rows[i], "a DELETE from"), nil
	}
	if err := mt.rb.AppendEncoded(bytesOf(prev), s.txn.Pos, -1, s.txn.Partition); err != nil {
		return "", fmt.Errorf("replicate %s: %w", mt.t.QualifiedName(), err)
	}
	s.undo.del(st, key)
	return "", nil
}

// updateKeyed: image i is the old row (its key), i+1 the new one (the
// columns the statement set).
func (s *myStreamer) updateKeyed(mt *myTable, st *KeyState, ev *replication.RowsEvent, i int) (string, error) {
	key, msg := s.encodeKey(mt, st, ev, i, "an UPDATE of")
	if msg != "" {
		return msg, nil
	}
	prev, ok, err := st.get(key)
	if err != nil {
		return "", err
	}
	if !ok {
		return s.missingMsg(mt, st, ev.Rows[i], "an UPDATE of"), nil
	}
	key = append([]byte(nil), key...)
	row, msg := s.encodeImage(mt, st, ev, i+1, prev, "an UPDATE of")
	if msg != "" {
		return msg, nil
	}
	newKey, err := st.keyOf(row)
	if err != nil {
		return "", err
	}
	moved := !bytes.Equal(newKey, key)
	if moved {
		_, dup, err := st.get(newKey)
		if err != nil {
			return "", err
		}
		if dup {
			return s.duplicateMsg(mt, st, ev.Rows[i+1], "an UPDATE of"), nil
		}
	}
	if err := mt.rb.AppendEncoded(bytesOf(prev), s.txn.Pos, -1, s.txn.Partition); err != nil {
		return "", fmt.Errorf("replicate %s: %w", mt.t.QualifiedName(), err)
	}
	if err := mt.rb.AppendEncoded(row, s.txn.Pos, +1, s.txn.Partition); err != nil {
		return "", fmt.Errorf("replicate %s: %w", mt.t.QualifiedName(), err)
	}
	if moved {
		s.undo.del(st, key)
	}
	s.undo.put(st, newKey, row)
	return "", nil
}

// missingMsg is the definite error of a change whose key the state does
// not hold.
func (s *myStreamer) missingMsg(mt *myTable, st *KeyState, vals []any, what string) string {
	return fmt.Sprintf("%s %s at %s names the row with primary key %s, which the key state (the rows as replicated, by primary key) does not hold, so its old values are unknown; the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)",
		what, mt.t.QualifiedName(), s.txnGTID, describeMyKey(st, vals), mt.t.QualifiedName())
}

// duplicateMsg is the definite error of a change that gives a key a
// second row.
func (s *myStreamer) duplicateMsg(mt *myTable, st *KeyState, vals []any, what string) string {
	return fmt.Sprintf("%s %s at %s gives primary key %s a second row, which the key state cannot tell apart; the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)",
		what, mt.t.QualifiedName(), s.txnGTID, describeMyKey(st, vals), mt.t.QualifiedName())
}

// describeMyKey prints the key of a row image: (id, k)=(1, x).
func describeMyKey(st *KeyState, vals []any) string {
	var names, vs []string
	for _, i := range st.key {
		names = append(names, st.names[i])
		v := "?"
		if i < len(vals) {
			v = fmt.Sprint(vals[i])
			if b, ok := vals[i].([]byte); ok {
				v = string(b)
			}
			if len(v) > 64 {
				v = v[:61] + "..."
			}
		}
		vs = append(vs, v)
	}
	return "(" + strings.Join(names, ", ") + ")=(" + strings.Join(vs, ", ") + ")"
}

// rawRows is a rows event held while its table's state is rebuilt.
type rawRows struct {
	at   frontier.Time
	gtid string
	ev   *replication.RowsEvent // go-mysql reads every event into a buffer of its own
}

func holdRows(at frontier.Time, gtid string, ev *replication.RowsEvent) rawRows {
	return rawRows{at: at, gtid: gtid, ev: ev}
}

// restate follows a re-snapshot of mt from the open transaction on that
// the sink took: a table with a key state holds its changes until the
// sink hands over the state of the copy (StateTaker).
func (s *myStreamer) restate(mt *myTable) error {
	if mt.state == nil && !mt.restating {
		return nil
	}
	mt.state = nil
	taker, ok := s.sink.(StateTaker)
	if !ok {
		return s.fail(mt, fmt.Sprintf("%s is re-snapshotted at %s, and its rows by key (binlog_row_image is not FULL) cannot be read from the copy by this stream; the collection stops here: %s", mt.t.QualifiedName(), s.txnGTID, keyedFix(mt.t.QualifiedName())))
	}
	taker.Restate(mt.t.QualifiedName(), nil)
	mt.restating = true
	return nil
}

// takeStates hands over the held changes of the tables whose states the
// sink rebuilt (StateTaker), before the progress it allows is reported.
func (s *myStreamer) takeStates() error {
	taker, ok := s.sink.(StateTaker)
	if !ok {
		return nil
	}
	for _, mt := range s.tables {
		if !mt.restating {
			continue
		}
		st, from, done := taker.TakeState(mt.t.QualifiedName())
		if !done {
			continue
		}
		mt.restating = false
		if st == nil {
			mt.failed, mt.raw, mt.rawTxn = true, nil, nil
			continue
		}
		mt.state = st
		if err := s.replay(mt, from); err != nil {
			return err
		}
	}
	return nil
}

// replay hands over mt's held changes from is not beyond, through its
// new state.
func (s *myStreamer) replay(mt *myTable, from frontier.Frontier) error {
	txn, gtid, touched, handed, emitted, skip := s.txn, s.txnGTID, s.touched, s.handed, s.emittedTxn, s.skip
	defer func() {
		s.txn, s.txnGTID, s.touched, s.handed, s.emittedTxn, s.skip = txn, gtid, touched, handed, emitted, skip
	}()
	raw := mt.raw
	mt.raw = nil
	s.touched, s.skip = []*myTable{mt}, 0
	if mt.rb == nil {
		mt.rb = myarrow.NewRowBuilder(s.cfg.Mem, mt.t, s.domain, s.cfg.Source)
	}
	for _, r := range raw {
		if mt.failed {
			return nil
		}
		if from.Beyond(r.at) {
			continue // in the copy
		}
		s.txn, s.txnGTID = r.at, r.gtid
		if err := s.rowsKeyed(mt, r.ev); err != nil {
			return err
		}
	}
	if mt.failed {
		return nil
	}
	return s.flush()
}
