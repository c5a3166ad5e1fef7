package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

func TestCheckOwner(t *testing.T) {
	ctx := context.Background()
	st := openTest(t, t.TempDir(), Options{})
	fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}
	for name, source := range map[string]string{"pg.orders": "pg", "kafka.events": "kafka1", "manual": ""} {
		var md arrow.Metadata
		if source != "" {
			md = arrow.NewMetadata([]string{pipe.KeySource}, []string{source})
		}
		if _, err := st.CreateShard(ctx, name, arrow.NewSchema(fields, &md)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, collection, source string
		// want is "" for no error, else what the message contains; hint
		// what the hint contains.
		want, hint string
		owned      bool
	}{
		{"not created yet", "pg.customers", "pg", "", "", false},
		{"own collection", "pg.orders", "pg", "", "", false},
		{"another source's", "pg.orders", "kafka1", `collection pg.orders in ` + st.Dir() + ` belongs to source "pg"`, "ingest it into another store, or pass --source-id pg to resume that source", true},
		{"the other way round", "kafka.events", "pg", `belongs to source "kafka1"`, "pass --source-id kafka1", true},
		{"no source recorded", "manual", "pg", "belongs to no source", "ingest it into another store, or remove it", true},
		{"no source asked", "manual", "", "no source given", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := st.CheckOwner(ctx, tc.collection, tc.source)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckOwner(%s, %s) = %v, want nil", tc.collection, tc.source, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckOwner(%s, %s) = %v, want an error containing %q", tc.collection, tc.source, err, tc.want)
			}
			if errors.Is(err, ErrOwned) != tc.owned {
				t.Fatalf("errors.Is(%v, ErrOwned) = %v, want %v", err, !tc.owned, tc.owned)
			}
			if h := hint.Of(err); !strings.Contains(h, tc.hint) {
				t.Fatalf("hint %q, want it to contain %q", h, tc.hint)
			}
		})
	}

	t.Run("a read failure is not ownership", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := st.CheckOwner(cctx, "pg.orders", "kafka1")
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrOwned) {
			t.Fatalf("got %v, want context.Canceled and not ErrOwned", err)
		}
	})
}
