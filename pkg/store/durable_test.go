package store

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

func TestDurableFrontier(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := st.DurableFrontier(ctx, "pg"); err != nil || !f.IsEmpty() {
		t.Fatalf("no bindings: %v, %v", f, err)
	}
	lsn := func(n uint64) frontier.Frontier { return frontier.Single(frontier.DomainLSN, n) }
	if _, err := st.AppendBindings(ctx, "pg", 0, 301, []frontier.Binding{{Time: 100, Frontier: lsn(1)}, {Time: 200, Frontier: lsn(50)}, {Time: 300, Frontier: lsn(90)}}); err != nil {
		t.Fatal(err)
	}
	md := arrow.NewMetadata([]string{"rtr.source"}, []string{"pg"})
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, &md)
	a, err := st.CreateShard(ctx, "public.a", schema)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.CreateShard(ctx, "public.b", schema)
	if err != nil {
		t.Fatal(err)
	}
	other := arrow.NewMetadata([]string{"rtr.source"}, []string{"other"})
	if _, err := st.CreateShard(ctx, "public.c", arrow.NewSchema(schema.Fields(), &other)); err != nil {
		t.Fatal(err) // another source's collection: must not count
	}
	for _, tc := range []struct {
		name           string
		upperA, upperB uint64
		want           uint64
	}{
		{"nothing durable", 0, 0, 0},
		{"one collection behind", 201, 0, 0},
		{"both past the first binding", 201, 101, 1},
		{"both past the second", 301, 201, 50},
		{"at a binding time is not past it", 301, 300, 50},
		{"both past the last", 400, 301, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, x := range []struct {
				sh *Shard
				u  uint64
			}{{a, tc.upperA}, {b, tc.upperB}} {
				if err := x.sh.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				if cur := x.sh.Upper(); x.u > cur {
					if _, err := x.sh.Append(ctx, cur, x.u, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			f, err := st.DurableFrontier(ctx, "pg")
			if err != nil {
				t.Fatal(err)
			}
			if f.Pos() != tc.want {
				t.Fatalf("durable frontier %s, want LSN %d", f, tc.want)
			}
		})
	}
}

func TestLeastUpper(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openTest(t, dir, Options{})
	// Appends go through another handle on the directory, so LeastUpper
	// must re-read each manifest to see them.
	writer := openTest(t, dir, Options{})
	for name, upper := range map[string]uint64{"a": 30, "b": 10, "c": 20, "zero": 0} {
		sh := createTest(t, writer, name, testFields)
		if upper > 0 {
			if _, err := sh.Append(ctx, 0, upper, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name        string
		collections []string
		want        uint64
	}{
		{"empty list", nil, 0},
		{"one", []string{"a"}, 30},
		{"different uppers", []string{"a", "b", "c"}, 10},
		{"the least is last", []string{"a", "c", "b"}, 10},
		{"the least is first", []string{"b", "a"}, 10},
		{"a created shard with nothing durable", []string{"a", "zero"}, 0},
		{"a missing shard", []string{"a", "missing"}, 0},
		{"a missing shard first", []string{"missing", "a"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.LeastUpper(ctx, tc.collections)
			if err != nil || got != tc.want {
				t.Fatalf("LeastUpper(%q) = %d, %v; want %d", tc.collections, got, err, tc.want)
			}
		})
	}

	t.Run("sees appends of another handle", func(t *testing.T) {
		if got, err := st.LeastUpper(ctx, []string{"a", "b"}); err != nil || got != 10 {
			t.Fatalf("before: %d, %v", got, err)
		}
		b, err := writer.Shard(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Append(ctx, 10, 40, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := st.LeastUpper(ctx, []string{"a", "b"}); err != nil || got != 30 {
			t.Fatalf("after b moved to 40: %d, %v; want 30", got, err)
		}
	})

	t.Run("a cancelled context is an error", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := st.LeastUpper(cctx, []string{"a"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
}
