package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

func TestAppendReadBasics(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	sh := createTest(t, s, "public.orders", testFields)
	m := &model{}
	steps := []struct {
		name         string
		lower, upper uint64
		ups          []upd
		wantRows     int64
	}{
		{"inserts", 0, 100, []upd{{[]any{int64(2), "b"}, 10, 1}, {[]any{int64(1), "a"}, 20, 1}, {[]any{int64(3), nil}, 20, 2}}, 3},
		{"progress only", 100, 200, nil, 0},
		{"update and retraction", 200, 300, []upd{{[]any{int64(1), "a"}, 250, -1}, {[]any{int64(1), "A"}, 250, 1}, {[]any{int64(3), nil}, 299, -2}}, 3},
		{"cancelling updates", 300, 400, []upd{{[]any{int64(9), "x"}, 301, 1}, {[]any{int64(9), "x"}, 301, -1}}, 0},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			rec := buildRecord(t, testFields, st.ups)
			defer rec.Release()
			res, err := sh.Append(ctx, st.lower, st.upper, rec)
			if err != nil {
				t.Fatalf("append: %v", err)
			}
			if res.Status != Appended || res.Rows != st.wantRows || res.Upper != st.upper {
				t.Fatalf("result %+v, want appended %d rows upper %d", res, st.wantRows, st.upper)
			}
			m.ups = append(m.ups, st.ups...)
			for at := uint64(0); at < st.upper; at += 7 {
				checkAsOf(t, ctx, sh, m, 2, at)
			}
			checkChanges(t, ctx, sh, m, 2, 0, st.upper-1)
		})
	}
	info, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Batches) != 2 {
		t.Errorf("batches = %d, want 2 (empty and cancelling appends write no batch file)", len(info.Batches))
	}
	if got := info.Schema.Metadata().Values(); len(got) != 1 || got[0] != "k" {
		t.Errorf("schema metadata %v, want rtr.key=k", info.Schema.Metadata())
	}
	// A second handle sees everything.
	s2 := openTest(t, s.Dir(), Options{})
	sh2, err := s2.Shard(ctx, "public.orders")
	if err != nil {
		t.Fatal(err)
	}
	checkAsOf(t, ctx, sh2, m, 2, 399)
	cols, err := s2.Collections(ctx)
	if err != nil || len(cols) != 1 || cols[0] != "public.orders" {
		t.Fatalf("collections = %v, %v", cols, err)
	}
}

func TestReadErrors(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{Retain: 50})
	sh := createTest(t, s, "public.orders", testFields)
	if _, err := sh.ReadAsOf(ctx, 0); !errors.As(err, new(*NotReadableError)) || !strings.Contains(err.Error(), "nothing is durable yet") {
		t.Fatalf("read of empty shard: %v", err)
	}
	rec := buildRecord(t, testFields, []upd{{[]any{int64(1), "a"}, 1700000000000, 1}})
	defer rec.Release()
	if _, err := sh.Append(ctx, 0, 1700000005000, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.AppendError(ctx, 1700000005000, 1700000006000, "upstream table dropped"); err != nil {
		t.Fatal(err)
	}
	sh.st.opts.Retain = 4900 * 1e6 // 4900 ms
	if _, err := sh.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		read func() error
		want string
		as   any
	}{
		{"before since", func() error { _, err := sh.ReadAsOf(ctx, 1700000000000); return err },
			"read public.orders as of 1700000000000: not readable; readable times are [1700000001100, 1700000006000)", new(*NotReadableError)},
		{"at upper", func() error { _, err := sh.ReadAsOf(ctx, 1700000006000); return err },
			"readable times are [1700000001100, 1700000006000)", new(*NotReadableError)},
		{"at definite error", func() error { _, err := sh.ReadAsOf(ctx, 1700000005000); return err },
			"definite error at time 1700000005000: upstream table dropped", new(*DefiniteError)},
		{"changes over error", func() error { _, err := sh.Changes(ctx, 1700000004000, 1700000005500); return err },
			"upstream table dropped", new(*DefiniteError)},
		{"changes before since", func() error { _, err := sh.Changes(ctx, 1700000000000, 1700000002000); return err },
			"readable times are", new(*NotReadableError)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.read()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			switch as := tc.as.(type) {
			case **NotReadableError:
				if !errors.As(err, as) {
					t.Fatalf("error %T is not a *NotReadableError", err)
				}
			case **DefiniteError:
				if !errors.As(err, as) {
					t.Fatalf("error %T is not a *DefiniteError", err)
				}
			}
		})
	}
	// Just before the error the contents are readable.
	got, err := sh.ReadAsOf(ctx, 1700000004999)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if got.NumRows() != 1 {
		t.Fatalf("rows = %d, want 1", got.NumRows())
	}
}

func TestAppendValidation(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	sh := createTest(t, s, "db.t", testFields)
	good := buildRecord(t, testFields, []upd{{[]any{int64(1), "a"}, 5, 1}})
	defer good.Release()
	otherFields := []arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int32}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(append(otherFields, timeField, diffField), nil))
	b.Field(0).(*array.Int32Builder).Append(1)
	b.Field(1).(*array.StringBuilder).Append("a")
	b.Field(2).(*array.Uint64Builder).Append(5)
	b.Field(3).(*array.Int64Builder).Append(1)
	wrongType := b.NewRecord()
	defer wrongType.Release()
	b.Release()
	extraFields := append(append([]arrow.Field(nil), testFields...), arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64})
	tests := []struct {
		name           string
		lower, upper   uint64
		rec            arrow.Record
		want           string
		schemaMismatch bool
	}{
		{"wrong column type", 0, 10, wrongType, `column "k" is int32 in the batch but int64 in the store`, true},
		{"extra column", 0, 10, buildRecord(t, extraFields, []upd{{[]any{int64(1), "a", 1.0}, 5, 1}}), `extra column "x"`, true},
		{"time below expected upper", 6, 10, good, "outside the appended interval [6, 10)", false},
		{"time at new upper", 0, 5, good, "outside the appended interval [0, 5)", false},
		{"upper not advancing", 5, 5, good, "must be beyond the expected upper", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sh.Append(ctx, tc.lower, tc.upper, tc.rec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			var sm *SchemaMismatchError
			if errors.As(err, &sm) != tc.schemaMismatch {
				t.Fatalf("errors.As SchemaMismatchError = %t, want %t (%v)", !tc.schemaMismatch, tc.schemaMismatch, err)
			}
			if sh.Upper() != 0 {
				t.Fatalf("upper moved to %d", sh.Upper())
			}
		})
	}
	if _, err := s.CreateShard(ctx, "db.t", arrow.NewSchema(otherFields, nil)); err == nil || !strings.Contains(err.Error(), "exists with a different schema") {
		t.Fatalf("create with other schema: %v", err)
	}
	if _, err := s.Shard(ctx, "db.missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing shard: %v", err)
	}
}

func TestUpperMismatch(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	sh := createTest(t, s, "db.t", testFields)
	if _, err := sh.Append(ctx, 0, 10, nil); err != nil {
		t.Fatal(err)
	}
	_, err := sh.Append(ctx, 20, 30, nil)
	var um *UpperMismatchError
	if !errors.As(err, &um) || um.Expected != 20 || um.Actual != 10 {
		t.Fatalf("append ahead of upper: %v", err)
	}
}

func TestReplay(t *testing.T) {
	ctx := context.Background()
	first := []upd{{[]any{int64(1), "a"}, 1, 1}, {[]any{int64(2), "b"}, 5, 1}}
	second := []upd{{[]any{int64(1), "a"}, 12, -1}, {[]any{int64(3), "c"}, 15, 1}}
	tests := []struct {
		name         string
		lower, upper uint64
		ups          []upd
		wantStatus   AppendStatus
		wantErr      bool
		wantUpper    uint64
	}{
		{"same content", 0, 10, first, Skipped, false, 20},
		{"same content unsorted and split", 0, 10, []upd{first[1], {[]any{int64(1), "a"}, 1, 2}, {[]any{int64(1), "a"}, 1, -1}}, Skipped, false, 20},
		{"same two intervals", 0, 20, append(append([]upd(nil), first...), second...), Skipped, false, 20},
		{"same prefix then more", 10, 30, append(append([]upd(nil), second...), upd{[]any{int64(4), "d"}, 25, 1}), PartiallySkipped, false, 30},
		{"different content", 0, 10, []upd{{[]any{int64(1), "a"}, 1, 1}}, 0, true, 20},
		{"different time", 10, 20, []upd{{[]any{int64(1), "a"}, 12, -1}, {[]any{int64(3), "c"}, 14, 1}}, 0, true, 20},
		{"extra row beyond in remainder is fine but durable part differs", 10, 30, []upd{{[]any{int64(3), "c"}, 15, 1}}, 0, true, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, Options{})
			sh := createTest(t, s, "db.t", testFields)
			for i, ups := range [][]upd{first, second} {
				rec := buildRecord(t, testFields, ups)
				if _, err := sh.Append(ctx, uint64(i*10), uint64(i*10+10), rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
			before := snapshotDir(t, dir)
			rec := buildRecord(t, testFields, tc.ups)
			defer rec.Release()
			res, err := sh.Append(ctx, tc.lower, tc.upper, rec)
			if tc.wantErr {
				var um *UpperMismatchError
				if !errors.As(err, &um) || um.Actual != 20 || um.Reason == "" {
					t.Fatalf("want a mismatch with a reason, got %v", err)
				}
			} else {
				if err != nil {
					t.Fatalf("append: %v", err)
				}
				if res.Status != tc.wantStatus || !res.Verified || res.Upper != tc.wantUpper {
					t.Fatalf("result %+v, want status %v verified upper %d", res, tc.wantStatus, tc.wantUpper)
				}
			}
			if tc.wantStatus == PartiallySkipped {
				m := &model{ups: append(append(append([]upd(nil), first...), second...), upd{[]any{int64(4), "d"}, 25, 1})}
				checkAsOf(t, ctx, sh, m, 2, 29)
				checkChanges(t, ctx, sh, m, 2, 0, 29)
				return
			}
			if after := snapshotDir(t, dir); !equalSnapshots(before, after) {
				t.Fatalf("store changed by a skipped or refused replay")
			}
		})
	}
}

// snapshotDir returns every file's bytes under dir.
func snapshotDir(t testing.TB, dir string) map[string]string {
	t.Helper()
	if isS3(dir) {
		return snapshotS3(t, dir)
	}
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equalSnapshots(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestAppendErrorReplay(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	sh := createTest(t, s, "db.t", testFields)
	if _, err := sh.AppendError(ctx, 0, 10, "boom"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		msg     string
		upper   uint64
		want    AppendStatus
		wantErr bool
	}{
		{"same error", "boom", 10, Skipped, false},
		{"other message", "bang", 10, 0, true},
		{"same error and more", "boom", 15, PartiallySkipped, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := sh.AppendError(ctx, 0, tc.upper, tc.msg)
			if tc.wantErr {
				if !errors.As(err, new(*UpperMismatchError)) {
					t.Fatalf("want mismatch, got %v", err)
				}
				return
			}
			if err != nil || res.Status != tc.want {
				t.Fatalf("got %+v, %v; want %v", res, err, tc.want)
			}
		})
	}
	if sh.Upper() != 15 {
		t.Fatalf("upper %d, want 15", sh.Upper())
	}
}

func TestBatchFileIsPlainArrow(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	sh := createTest(t, s, "db.t", testFields)
	rec := buildRecord(t, testFields, []upd{{[]any{int64(2), "b"}, 3, 1}, {[]any{int64(1), nil}, 4, 1}, {[]any{int64(1), nil}, 2, 1}})
	defer rec.Release()
	if _, err := sh.Append(ctx, 0, 10, rec); err != nil {
		t.Fatal(err)
	}
	info, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(info.Batches[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ipc.NewFileReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Record(0)
	if err != nil {
		t.Fatal(err)
	}
	ups := recordRows(t, got, 2, true)
	want := []upd{{[]any{int64(1), nil}, 2, 1}, {[]any{int64(1), nil}, 4, 1}, {[]any{int64(2), "b"}, 3, 1}}
	if !equalUpds(ups, want, true) {
		t.Fatalf("batch rows not sorted by row then time:\n%s", fmtUpds(ups))
	}
	if v, ok := r.Schema().Metadata().GetValue("rtr.key"); !ok || v != "k" {
		t.Fatalf("batch schema lost rtr.key: %v", r.Schema().Metadata())
	}
}

func TestEscapeName(t *testing.T) {
	tests := []struct{ name, want string }{
		{"public.orders", "public.orders"},
		{"my-topic_1", "my-topic_1"},
		{"..", "%2E."},
		{"../etc/passwd", "%2E.%2Fetc%2Fpasswd"},
		{"a b%c", "a%20b%25c"},
		{".hidden", "%2Ehidden"},
		{"über", "%C3%BCber"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := escapeName(tc.name)
			if err != nil || got != tc.want {
				t.Fatalf("escape = %q, %v; want %q", got, err, tc.want)
			}
			back, err := unescapeName(got)
			if err != nil || back != tc.name {
				t.Fatalf("unescape = %q, %v", back, err)
			}
		})
	}
	if _, err := escapeName(""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty name: %v", err)
	}
}
