package store

import (
	"context"
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
