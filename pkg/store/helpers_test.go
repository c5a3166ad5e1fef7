package store

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// upd is one update of the in-memory model. Row values are int64, string,
// float64 or nil (null).
type upd struct {
	row  []any
	time uint64
	diff int64
}

func rowKey(row []any) string {
	var b strings.Builder
	for i, v := range row {
		if i > 0 {
			b.WriteByte('|')
		}
		switch v := v.(type) {
		case nil:
			b.WriteString("∅")
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case string:
			b.WriteString(strconv.Quote(v))
		case float64:
			fmt.Fprintf(&b, "f%x", math.Float64bits(v))
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case arrow.MonthDayNanoInterval:
			fmt.Fprintf(&b, "i%d,%d,%d", v.Months, v.Days, v.Nanoseconds)
		case []any:
			b.WriteString("[" + rowKey(v) + "]")
		default:
			panic(fmt.Sprintf("rowKey: %T", v))
		}
	}
	return b.String()
}

// cmpVals is the test's own statement of the store's row order.
func cmpVals(a, b []any) int {
	for i := range a {
		x, y := a[i], b[i]
		switch {
		case x == nil && y == nil:
			continue
		case x == nil:
			return -1
		case y == nil:
			return 1
		}
		var c int
		switch x := x.(type) {
		case int64:
			c = cmp.Compare(x, y.(int64))
		case string:
			c = strings.Compare(x, y.(string))
		case float64:
			c = cmp.Compare(f64key(x), f64key(y.(float64)))
		case arrow.MonthDayNanoInterval:
			y := y.(arrow.MonthDayNanoInterval)
			c = cmp.Or(cmp.Compare(x.Months, y.Months), cmp.Compare(x.Days, y.Days), cmp.Compare(x.Nanoseconds, y.Nanoseconds))
		case []any:
			// Lists: element by element, then the shorter first.
			y := y.([]any)
			n := min(len(x), len(y))
			c = cmp.Or(cmpVals(x[:n], y[:n]), cmp.Compare(len(x), len(y)))
		default:
			panic(fmt.Sprintf("cmpVals: %T", x))
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// buildRecord makes a record of the user fields plus _time and _diff.
func buildRecord(t testing.TB, user []arrow.Field, ups []upd) arrow.Record {
	t.Helper()
	fields := append(append([]arrow.Field(nil), user...), timeField, diffField)
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	for _, u := range ups {
		for i, v := range u.row {
			appendVal(t, b.Field(i), v)
		}
		b.Field(len(user)).(*array.Uint64Builder).Append(u.time)
		b.Field(len(user) + 1).(*array.Int64Builder).Append(u.diff)
	}
	return b.NewRecord()
}

// appendVal appends a model value (nil for null) to a builder.
func appendVal(t testing.TB, fb array.Builder, v any) {
	t.Helper()
	if v == nil {
		fb.AppendNull()
		return
	}
	switch fb := fb.(type) {
	case *array.Int64Builder:
		fb.Append(v.(int64))
	case *array.StringBuilder:
		fb.Append(v.(string))
	case *array.Float64Builder:
		fb.Append(v.(float64))
	case *array.MonthDayNanoIntervalBuilder:
		fb.Append(v.(arrow.MonthDayNanoInterval))
	case array.ListLikeBuilder:
		fb.Append(true)
		for _, e := range v.([]any) {
			appendVal(t, fb.ValueBuilder(), e)
		}
	default:
		t.Fatalf("appendVal: builder %T", fb)
	}
}

// valAt converts row i of an array back into a model value.
func valAt(t testing.TB, col arrow.Array, i int) any {
	t.Helper()
	if col.IsNull(i) {
		return nil
	}
	switch col := col.(type) {
	case *array.Int64:
		return col.Value(i)
	case *array.String:
		return col.Value(i)
	case *array.Float64:
		return col.Value(i)
	case *array.MonthDayNanoInterval:
		return col.Value(i)
	case array.ListLike:
		lo, hi := col.ValueOffsets(i)
		l := []any{}
		for k := lo; k < hi; k++ {
			l = append(l, valAt(t, col.ListValues(), int(k)))
		}
		return l
	}
	t.Fatalf("valAt: %T", col)
	return nil
}

// recordRows converts a read result (user columns, then optional _time,
// then _diff) back into updates.
func recordRows(t testing.TB, rec arrow.Record, nuser int, withTime bool) []upd {
	t.Helper()
	var out []upd
	n := int(rec.NumRows())
	diffs := rec.Column(int(rec.NumCols()) - 1).(*array.Int64)
	var times *array.Uint64
	if withTime {
		times = rec.Column(nuser).(*array.Uint64)
	}
	for i := 0; i < n; i++ {
		row := make([]any, nuser)
		for c := 0; c < nuser; c++ {
			row[c] = valAt(t, rec.Column(c), i)
		}
		u := upd{row: row, diff: diffs.Value(i)}
		if times != nil {
			u.time = times.Value(i)
		}
		out = append(out, u)
	}
	return out
}

// model is the naive in-memory reference. gens are the starts of the
// generations after the first (which starts at 0), ascending: from a
// start T on, the contents are only the updates at times >= T.
type model struct {
	ups  []upd
	gens []uint64
}

// genStart is the start of the generation in force at t.
func (m *model) genStart(t uint64) uint64 {
	s := uint64(0)
	for _, g := range m.gens {
		if g <= t {
			s = g
		}
	}
	return s
}

// asOf returns the consolidated contents at t, sorted by row: the updates
// at times in [genStart(t), t].
func (m *model) asOf(t uint64) []upd {
	acc := map[string]*upd{}
	from := m.genStart(t)
	for _, u := range m.ups {
		if u.time > t || u.time < from {
			continue
		}
		k := rowKey(u.row)
		if a := acc[k]; a != nil {
			a.diff += u.diff
		} else {
			c := u
			c.time = 0
			acc[k] = &c
		}
	}
	var out []upd
	for _, a := range acc {
		if a.diff != 0 {
			out = append(out, *a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return cmpVals(out[i].row, out[j].row) < 0 })
	return out
}

// changes returns the consolidated updates in (t1, t2], sorted by time
// then row: the updates at those times, and at each generation start T
// among them the retraction of the contents as of T-1.
func (m *model) changes(t1, t2 uint64) []upd {
	type key struct {
		k string
		t uint64
	}
	acc := map[key]*upd{}
	add := func(u upd) {
		k := key{rowKey(u.row), u.time}
		if a := acc[k]; a != nil {
			a.diff += u.diff
		} else {
			c := u
			acc[k] = &c
		}
	}
	for _, u := range m.ups {
		if u.time > t1 && u.time <= t2 {
			add(u)
		}
	}
	for _, g := range m.gens {
		if g > t1 && g <= t2 {
			for _, u := range m.asOf(g - 1) {
				add(upd{u.row, g, -u.diff})
			}
		}
	}
	var out []upd
	for _, a := range acc {
		if a.diff != 0 {
			out = append(out, *a)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].time != out[j].time {
			return out[i].time < out[j].time
		}
		return cmpVals(out[i].row, out[j].row) < 0
	})
	return out
}

func fmtUpds(us []upd) string {
	var b bytes.Buffer
	for _, u := range us {
		fmt.Fprintf(&b, "  %s @%d %+d\n", rowKey(u.row), u.time, u.diff)
	}
	return b.String()
}

// equalUpds compares exactly, including order.
func equalUpds(a, b []upd, withTime bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if rowKey(a[i].row) != rowKey(b[i].row) || a[i].diff != b[i].diff || (withTime && a[i].time != b[i].time) {
			return false
		}
	}
	return true
}

// checkAsOf compares a ReadAsOf with the model.
func checkAsOf(t testing.TB, ctx context.Context, sh *Shard, m *model, nuser int, at uint64) {
	t.Helper()
	rec, err := sh.ReadAsOf(ctx, at)
	if err != nil {
		t.Fatalf("read as of %d: %v", at, err)
	}
	defer rec.Release()
	got := recordRows(t, rec, nuser, false)
	want := m.asOf(at)
	if !equalUpds(got, want, false) {
		t.Fatalf("read as of %d:\ngot\n%swant\n%s", at, fmtUpds(got), fmtUpds(want))
	}
	// The streaming reads hand over the same rows, in order, with no row
	// in two records.
	var streamed []upd
	err = sh.StreamAsOf(ctx, at, func(s *arrow.Schema) error {
		if !s.Equal(rec.Schema()) {
			t.Fatalf("stream as of %d: schema %v, ReadAsOf's %v", at, s, rec.Schema())
		}
		return nil
	}, func(r arrow.Record) error {
		streamed = append(streamed, recordRows(t, r, nuser, false)...)
		return nil
	})
	if err != nil {
		t.Fatalf("stream as of %d: %v", at, err)
	}
	if !equalUpds(streamed, got, false) {
		t.Fatalf("stream as of %d:\ngot\n%sReadAsOf\n%s", at, fmtUpds(streamed), fmtUpds(got))
	}
	var scanned []upd
	begun := 0
	err = sh.ScanAsOf(ctx, at, func() { begun++ }, func(r arrow.Record) error {
		for _, u := range recordRows(t, r, nuser, true) {
			if u.time > at {
				t.Fatalf("scan as of %d: an update at %d", at, u.time)
			}
			u.time = 0
			scanned = append(scanned, u)
		}
		return nil
	})
	if err != nil || begun != 1 {
		t.Fatalf("scan as of %d: begun %d times: %v", at, begun, err)
	}
	if !equalUpds(scanned, got, false) {
		t.Fatalf("scan as of %d:\ngot\n%sReadAsOf\n%s", at, fmtUpds(scanned), fmtUpds(got))
	}
}

func checkChanges(t testing.TB, ctx context.Context, sh *Shard, m *model, nuser int, t1, t2 uint64) {
	t.Helper()
	rec, err := sh.Changes(ctx, t1, t2)
	if err != nil {
		t.Fatalf("changes (%d, %d]: %v", t1, t2, err)
	}
	defer rec.Release()
	got := recordRows(t, rec, nuser, true)
	want := m.changes(t1, t2)
	if !equalUpds(got, want, true) {
		t.Fatalf("changes (%d, %d]:\ngot\n%swant\n%s", t1, t2, fmtUpds(got), fmtUpds(want))
	}
	// StreamChanges hands over the same updates in the same order,
	// sorted in memory or (chunks of 512 bytes) as staged runs.
	for _, chunk := range []int64{changesChunkBytes, 512} {
		var streamed []upd
		started := 0
		err := sh.streamChanges(ctx, t1, t2, chunk, func(s *arrow.Schema) error {
			started++
			if !s.Equal(rec.Schema()) {
				t.Fatalf("stream changes (%d, %d]: schema %v, Changes' %v", t1, t2, s, rec.Schema())
			}
			return nil
		}, func(r arrow.Record) error {
			streamed = append(streamed, recordRows(t, r, nuser, true)...)
			return nil
		})
		if err != nil || started != 1 {
			t.Fatalf("stream changes (%d, %d], chunk %d: started %d times: %v", t1, t2, chunk, started, err)
		}
		if !equalUpds(streamed, got, true) {
			t.Fatalf("stream changes (%d, %d], chunk %d:\ngot\n%sChanges\n%s", t1, t2, chunk, fmtUpds(streamed), fmtUpds(got))
		}
	}
}

// randSchema returns 1-4 columns of int64/utf8/float64, some nullable;
// with nested, also month_day_nano_interval, list<int64>, list<utf8>,
// large_list<utf8> and list<list<int64>> (elements nullable or not).
func randSchema(r *rand.Rand, nested bool) []arrow.Field {
	n := 1 + r.IntN(4)
	kinds := 3
	if nested {
		kinds = 8
	}
	var fs []arrow.Field
	for i := 0; i < n; i++ {
		var dt arrow.DataType
		switch r.IntN(kinds) {
		case 0:
			dt = arrow.PrimitiveTypes.Int64
		case 1:
			dt = arrow.BinaryTypes.String
		case 2:
			dt = arrow.PrimitiveTypes.Float64
		case 3:
			dt = arrow.FixedWidthTypes.MonthDayNanoInterval
		case 4:
			dt = randList(r, arrow.PrimitiveTypes.Int64)
		case 5:
			dt = randList(r, arrow.BinaryTypes.String)
		case 6:
			dt = arrow.LargeListOf(arrow.BinaryTypes.String)
		default:
			dt = arrow.ListOf(randList(r, arrow.PrimitiveTypes.Int64))
		}
		fs = append(fs, arrow.Field{Name: fmt.Sprintf("c%d", i), Type: dt, Nullable: r.IntN(2) == 0})
	}
	return fs
}

func randList(r *rand.Rand, elem arrow.DataType) arrow.DataType {
	if r.IntN(3) == 0 {
		return arrow.ListOfNonNullable(elem)
	}
	return arrow.ListOf(elem)
}

// randRow draws values from small domains so rows collide often.
func randRow(r *rand.Rand, fs []arrow.Field) []any {
	row := make([]any, len(fs))
	for i, f := range fs {
		row[i] = randVal(r, f.Type, f.Nullable)
	}
	return row
}

func randVal(r *rand.Rand, dt arrow.DataType, nullable bool) any {
	if nullable && r.IntN(5) == 0 {
		return nil
	}
	switch dt.ID() {
	case arrow.INT64:
		return int64(r.IntN(7)) - 3
	case arrow.STRING:
		return []string{"", "a", "ab", "abcdefgh", "abcdefghi", "b\x00", "zz"}[r.IntN(7)]
	case arrow.FLOAT64:
		return []float64{0, math.Copysign(0, -1), 1.5, -2, math.Inf(1), math.NaN()}[r.IntN(6)]
	case arrow.INTERVAL_MONTH_DAY_NANO:
		return arrow.MonthDayNanoInterval{Months: int32(r.IntN(3)) - 1, Days: int32(r.IntN(3)) - 1, Nanoseconds: int64(r.IntN(3)) - 1}
	case arrow.LIST, arrow.LARGE_LIST:
		// Mostly short lists, so equal lists recur.
		ef := dt.(arrow.ListLikeType).ElemField()
		l := []any{}
		for n := r.IntN(4); n > 0; n-- {
			l = append(l, randVal(r, ef.Type, ef.Nullable))
		}
		return l
	}
	panic(fmt.Sprintf("randVal: %s", dt))
}

// testSchema is the fixed schema of most tests: k int64, s utf8 (nullable).
var testFields = []arrow.Field{
	{Name: "k", Type: arrow.PrimitiveTypes.Int64},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
}

// openTest opens the store at dir: a directory, or an s3:// location of
// a test server (testBackend.dir), which gets a new S3FS of it.
func openTest(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if opts.FS == nil && isS3(dir) {
		opts.FS = baseFS(t, dir)
	}
	s, err := Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func createTest(t testing.TB, s *Store, name string, fields []arrow.Field) *Shard {
	t.Helper()
	sh, err := s.CreateShard(context.Background(), name, testSchema(fields))
	if err != nil {
		t.Fatalf("create shard: %v", err)
	}
	return sh
}

// testSchema is the schema createTest gives a collection of fields.
func testSchema(fields []arrow.Field) *arrow.Schema {
	md := arrow.NewMetadata([]string{"rtr.key"}, []string{fields[0].Name})
	return arrow.NewSchema(fields, &md)
}
