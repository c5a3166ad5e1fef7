package replicate

// Unit tests of the key state and of the decoder's keyed path, fed with
// pgoutput messages directly (no server): the rollback on a lost
// connection in the middle of a transaction, the rebuild from store
// batches, and the state's memory.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pglogrepl"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// kvTable is public.kv (id int4 PRIMARY KEY, v text).
func kvTable() *pgarrow.Table {
	return &pgarrow.Table{Schema: "public", Name: "kv", OID: 7, ReplicaIdentity: "default", Columns: []pgarrow.Column{
		{Name: "id", TypeOID: pgarrow.OIDInt4, TypeMod: -1, TypeName: "integer", NotNull: true},
		{Name: "v", TypeOID: pgarrow.OIDText, TypeMod: -1, TypeName: "text"},
	}}
}

// memSink renders every update as "row diff" and keeps errors.
type memSink struct {
	rows []string
	errs []string
}

func (s *memSink) Data(_ string, rec arrow.Record) error {
	cols, times, diffs, _ := pipe.SplitData(rec)
	for i := range int(rec.NumRows()) {
		var vs []string
		for _, c := range cols {
			vs = append(vs, fmt.Sprint(pgarrow.GoValue(c, i)))
		}
		s.rows = append(s.rows, fmt.Sprintf("%s@%d %+d", strings.Join(vs, ","), times.Value(i), diffs.Value(i)))
	}
	return nil
}
func (s *memSink) Progress(string, frontier.Frontier) error { return nil }
func (s *memSink) Error(_ string, at frontier.Time, msg string) error {
	s.errs = append(s.errs, fmt.Sprintf("@%d %s", at.Pos, msg))
	return nil
}

func (s *memSink) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("unexpected reset of %s at %d", coll, at.Pos)
}

func text(vals ...string) *pglogrepl.TupleData {
	td := &pglogrepl.TupleData{}
	for _, v := range vals {
		switch v {
		case "<null>":
			td.Columns = append(td.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull})
		case "<toast>":
			td.Columns = append(td.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeToast})
		default:
			td.Columns = append(td.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)})
		}
	}
	return td
}

func kvRelation() *pglogrepl.RelationMessage {
	return &pglogrepl.RelationMessage{RelationID: 7, Namespace: "public", RelationName: "kv", ReplicaIdentity: 'd', Columns: []*pglogrepl.RelationMessageColumn{
		{Flags: 1, Name: "id", DataType: pgarrow.OIDInt4, TypeModifier: -1},
		{Name: "v", DataType: pgarrow.OIDText, TypeModifier: -1},
	}}
}

func newKeyedDecoder(t *testing.T, sink pipe.Sink, st *KeyState, flushRows int) *decoder {
	t.Helper()
	resolve := func(_ context.Context, m *pglogrepl.RelationMessage) (*pgarrow.Table, error) {
		tb := kvTable()
		tb.ReplicaIdentity = pgarrow.ReplicaIdentityName(m.ReplicaIdentity)
		return tb, nil
	}
	d := newDecoder(sink, memory.DefaultAllocator, resolve, func(*pgarrow.Table) (*KeyState, error) { return st, nil }, flushRows, 1<<20, 0)
	t.Cleanup(d.release)
	return d
}

func must(t *testing.T, d *decoder, msgs ...pglogrepl.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := d.handle(context.Background(), m); err != nil {
			t.Fatalf("handle %T: %v", m, err)
		}
	}
}

// stateRows lists the state's rows, sorted.
func stateRows(t *testing.T, st *KeyState) []string {
	t.Helper()
	b, err := pgarrow.NewRowBuilder(memory.DefaultAllocator, st.Table())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	for _, row := range st.rows {
		if err := b.AppendEncoded([]byte(row)); err != nil {
			t.Fatal(err)
		}
	}
	var out []string
	arrs := b.NewArrays()
	for i := range arrs[0].Len() {
		out = append(out, fmt.Sprintf("%v,%v", pgarrow.GoValue(arrs[0], i), pgarrow.GoValue(arrs[1], i)))
	}
	for _, a := range arrs {
		a.Release()
	}
	slices.Sort(out)
	return out
}

func begin(lsn uint64) *pglogrepl.BeginMessage {
	return &pglogrepl.BeginMessage{FinalLSN: pglogrepl.LSN(lsn)}
}
func commit(lsn uint64) *pglogrepl.CommitMessage {
	return &pglogrepl.CommitMessage{CommitLSN: pglogrepl.LSN(lsn), TransactionEndLSN: pglogrepl.LSN(lsn + 1)}
}
func ins(vals ...string) *pglogrepl.InsertMessage {
	return &pglogrepl.InsertMessage{RelationID: 7, Tuple: text(vals...)}
}
func upd(old *pglogrepl.TupleData, vals ...string) *pglogrepl.UpdateMessage {
	m := &pglogrepl.UpdateMessage{RelationID: 7, NewTuple: text(vals...)}
	if old != nil {
		m.OldTuple, m.OldTupleType = old, pglogrepl.UpdateMessageTupleTypeKey
	}
	return m
}
func del(vals ...string) *pglogrepl.DeleteMessage {
	return &pglogrepl.DeleteMessage{RelationID: 7, OldTuple: text(vals...), OldTupleType: pglogrepl.DeleteMessageTupleTypeKey}
}

// TestKeyedDecoderInterrupted: a connection lost in the middle of a
// transaction, once after part of it was emitted, takes the key state back
// to what was emitted; the transaction sent again ends exact.
func TestKeyedDecoderInterrupted(t *testing.T) {
	for _, flushRows := range []int{1, 2, 3, 100} {
		t.Run(fmt.Sprintf("flush %d", flushRows), func(t *testing.T) {
			st, err := NewKeyState(kvTable(), []string{"id"})
			if err != nil {
				t.Fatal(err)
			}
			sink := &memSink{}
			d := newKeyedDecoder(t, sink, st, flushRows)
			must(t, d, kvRelation(), begin(10), ins("1", "a"), ins("2", "b"), commit(10))
			txn := []pglogrepl.Message{begin(20),
				upd(nil, "1", "a2"),                // key kept: no old tuple
				upd(text("2", "<null>"), "3", "b"), // key 2 -> 3
				ins("4", "d"),
				del("1", "<null>"),
				upd(nil, "4", "<toast>"), // TOASTed v unchanged
				commit(20)}
			// Lose the connection before the commit, then once more after
			// a few messages of the transaction sent again.
			must(t, d, txn[:5]...)
			d.interrupted()
			must(t, d, kvRelation())
			must(t, d, txn[:3]...)
			d.interrupted()
			must(t, d, kvRelation())
			must(t, d, txn...)
			if len(sink.errs) > 0 {
				t.Fatalf("errors: %q", sink.errs)
			}
			want := []string{"1,a@10 +1", "2,b@10 +1",
				"1,a@20 -1", "1,a2@20 +1", "2,b@20 -1", "3,b@20 +1", "4,d@20 +1", "1,a2@20 -1", "4,d@20 -1", "4,d@20 +1"}
			if !slices.Equal(sink.rows, want) {
				t.Errorf("emitted\n%q\nwant\n%q", sink.rows, want)
			}
			if got := stateRows(t, st); !slices.Equal(got, []string{"3,b", "4,d"}) {
				t.Errorf("state %q, want [3,b 4,d]", got)
			}
		})
	}
}

// TestKeyedDecoderDefiniteErrors: changes the state cannot follow stop the
// collection at their commit, naming the key, and emit nothing of theirs.
func TestKeyedDecoderDefiniteErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  pglogrepl.Message
		want string
	}{
		{"update of an unknown key", upd(nil, "9", "x"), "an UPDATE of public.kv at 0/14 names the row with key (id)=(9), which the key state"},
		{"delete of an unknown key", del("9", "<null>"), "a DELETE from public.kv at 0/14 names the row with key (id)=(9)"},
		{"second row of a key", ins("1", "again"), "an INSERT into public.kv at 0/14 gives key (id)=(1) a second row"},
		{"key moved onto another", upd(text("1", "<null>"), "2", "x"), "an UPDATE of public.kv at 0/14 gives key (id)=(2) a second row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := NewKeyState(kvTable(), []string{"id"})
			sink := &memSink{}
			d := newKeyedDecoder(t, sink, st, 100)
			must(t, d, kvRelation(), begin(10), ins("1", "a"), ins("2", "b"), commit(10), begin(20), ins("5", "e"), tc.msg, ins("6", "f"), commit(20))
			if len(sink.errs) != 1 || !strings.Contains(sink.errs[0], tc.want) || !strings.HasPrefix(sink.errs[0], "@20 ") {
				t.Errorf("errors %q, want one at 20 with %q", sink.errs, tc.want)
			}
			// The transaction's rows before the error are emitted, none after.
			if want := []string{"1,a@10 +1", "2,b@10 +1", "5,e@20 +1"}; !slices.Equal(sink.rows, want) {
				t.Errorf("emitted %q, want %q", sink.rows, want)
			}
		})
	}
}

// kvBatch is a store batch of public.kv: rows "id,v,diff".
func kvBatch(t *testing.T, rows ...string) arrow.Record {
	t.Helper()
	mem := memory.DefaultAllocator
	ib, vb, tb, db := array.NewInt32Builder(mem), array.NewStringBuilder(mem), array.NewUint64Builder(mem), array.NewInt64Builder(mem)
	for _, r := range rows {
		var id int32
		var v string
		var diff int64
		parts := strings.Split(r, ",")
		fmt.Sscan(parts[0], &id)
		v = parts[1]
		fmt.Sscan(parts[2], &diff)
		ib.Append(id)
		vb.Append(v)
		tb.Append(1)
		db.Append(diff)
	}
	schema := pipe.DataSchema(kvTable().Fields(), frontier.DomainSystem, arrow.Metadata{})
	cols := []arrow.Array{ib.NewArray(), vb.NewArray(), tb.NewArray(), db.NewArray()}
	rec := array.NewRecord(schema, cols, int64(len(rows)))
	for _, c := range cols {
		c.Release()
	}
	t.Cleanup(rec.Release)
	return rec
}

func TestKeyStateRebuild(t *testing.T) {
	st, _ := NewKeyState(kvTable(), []string{"id"})
	st.put([]byte("junk"), []byte("junk")) // a pass that started over
	st.ResetState()
	// Batches are consolidated each, not across: a retraction may come
	// before its insertion.
	for _, b := range [][]string{{"1,a,1", "2,b,1", "3,c,1"}, {"2,b,-1", "2,b2,1", "4,d,-1"}, {"4,d,1", "3,c,-1"}} {
		if err := st.AddState(kvBatch(t, b...)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.EndState(); err != nil {
		t.Fatal(err)
	}
	if got := stateRows(t, st); !slices.Equal(got, []string{"1,a", "2,b2"}) {
		t.Errorf("state %q", got)
	}
	if st.Len() != 2 || st.data != (5+5+3)+(5+5+4) {
		t.Errorf("Len %d, data %d", st.Len(), st.data)
	}

	st.ResetState()
	if err := st.AddState(kvBatch(t, "1,a,1", "1,b,1")); err != nil {
		t.Fatal(err)
	}
	if err := st.EndState(); err == nil || !strings.Contains(err.Error(), "two rows have the same key (id)") {
		t.Errorf("two rows of a key: %v", err)
	}
}

// TestKeyStateMemory measures what a key costs: the heap the state of
// 200,000 rows (id int8, balance int8, note text of 16 bytes) holds, against
// Bytes' estimate.
func TestKeyStateMemory(t *testing.T) {
	tb := &pgarrow.Table{Schema: "public", Name: "acc", Columns: []pgarrow.Column{
		{Name: "id", TypeOID: pgarrow.OIDInt8, TypeMod: -1, NotNull: true},
		{Name: "balance", TypeOID: pgarrow.OIDInt8, TypeMod: -1, NotNull: true},
		{Name: "note", TypeOID: pgarrow.OIDText, TypeMod: -1},
	}}
	const n = 200_000
	build := func() *KeyState {
		st, _ := NewKeyState(tb, []string{"id"})
		var row []byte
		for i := range n {
			row = row[:0]
			row, _ = st.pg.AppendText(row, 0, fmt.Append(nil, i), false)
			row, _ = st.pg.AppendText(row, 1, []byte("1000"), false)
			row, _ = st.pg.AppendText(row, 2, []byte("sixteen bytes..."), false)
			key, err := st.keyOf(row)
			if err != nil {
				t.Fatal(err)
			}
			st.put(key, row)
		}
		return st
	}
	measureState(t, build, n, "encoded key 9 + row 36 bytes")
}

// measureState builds the state of n keys five times and compares what
// freeing it gives back (the median: other goroutines of the test binary
// may allocate meanwhile) with what Bytes estimates.
func measureState(t *testing.T, build func() *KeyState, n int, what string) {
	t.Helper()
	var held []int
	var est int
	for range 5 {
		st := build()
		est = st.Bytes() / n
		var with, without runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&with)
		runtime.KeepAlive(st)
		st = nil
		runtime.GC()
		runtime.ReadMemStats(&without)
		held = append(held, int(with.HeapAlloc)-int(without.HeapAlloc))
	}
	slices.Sort(held)
	per := held[2] / n
	t.Logf("%d keys: %d bytes of heap, %d per key (%s); Bytes() estimates %d per key (tries: %v)", n, held[2], per, what, est, held)
	if est < per/2 || est > per*2 {
		t.Errorf("Bytes() estimates %d per key, the heap says %d", est, per)
	}
}

// TestMySQLKeyStateMemory is TestKeyStateMemory for a MySQL table of an
// int primary key, a bigint and a varchar (the bank's accounts with a
// note), encoded from binlog values.
func TestMySQLKeyStateMemory(t *testing.T) {
	tb := &myarrow.Table{Schema: "shop", Name: "acc", PrimaryKey: []int{0}, Columns: []myarrow.Column{
		{Name: "id", DataType: "int", ColumnType: "int(11)", Kind: myarrow.KindInt, Bits: 32, Type: arrow.PrimitiveTypes.Int32},
		{Name: "balance", DataType: "bigint", ColumnType: "bigint(20)", Kind: myarrow.KindInt, Bits: 64, Type: arrow.PrimitiveTypes.Int64},
		{Name: "note", DataType: "varchar", ColumnType: "varchar(20)", Nullable: true, Kind: myarrow.KindString, Type: arrow.BinaryTypes.String},
	}}
	const n = 200_000
	measureState(t, func() *KeyState {
		st, err := NewMySQLKeyState(tb)
		if err != nil {
			t.Fatal(err)
		}
		var row []byte
		for i := range n {
			row = row[:0]
			for c, v := range []any{int32(i), int64(1000), "sixteen bytes..."} {
				if row, err = st.my.AppendBinlog(row, c, v); err != nil {
					t.Fatal(err)
				}
			}
			key, err := st.keyOf(row)
			if err != nil {
				t.Fatal(err)
			}
			st.put(key, row)
		}
		return st
	}, n, "encoded key 5 + row 32 bytes")
}

// TestKeyedTruncateState: emptying a state for a TRUNCATE is undone by a
// lost connection before the next flush, and kept after it.
func TestKeyedTruncateState(t *testing.T) {
	st, _ := NewKeyState(kvTable(), []string{"id"})
	d := newKeyedDecoder(t, &memSink{}, st, 100)
	must(t, d, kvRelation(), begin(10), ins("1", "a"), ins("2", "b"), commit(10), begin(20))
	d.truncateState(d.rels[7])
	if st.Len() != 0 || st.Bytes() != 0 {
		t.Fatalf("after truncateState: %d keys, %d bytes", st.Len(), st.Bytes())
	}
	d.interrupted()
	if got := stateRows(t, st); !slices.Equal(got, []string{"1,a", "2,b"}) {
		t.Errorf("after a lost connection: %q", got)
	}
	must(t, d, begin(20))
	d.truncateState(d.rels[7])
	must(t, d, ins("3", "c"), commit(20))
	d.interrupted()
	if got := stateRows(t, st); !slices.Equal(got, []string{"3,c"}) {
		t.Errorf("after the commit: %q", got)
	}
}
