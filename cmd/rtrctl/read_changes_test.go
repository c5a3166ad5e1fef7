package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"testing"

	"github.com/apache/arrow/go/v17/arrow/ipc"

	"github.com/rtrctl/rtrctl/internal/render"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// TestReadChangesStreams: read --changes, which streams the store's
// sorted changes, prints in every format what the whole in-memory
// Changes record rendered at once prints.
func TestReadChangesStreams(t *testing.T) {
	dir := t.TempDir() + "/data"
	seedStore(t, dir)
	ctx := context.Background()
	st, err := store.Open(ctx, dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(ctx, "public.orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, iv := range []struct {
		from, to uint64
	}{{100, 199}, {150, 160}} {
		rec, err := sh.Changes(ctx, iv.from, iv.to)
		if err != nil {
			t.Fatal(err)
		}
		for _, format := range []string{"table", "csv", "json", "arrow"} {
			var want bytes.Buffer
			if format == "arrow" {
				err = writeArrow(&want, "public.orders", frontier.DomainSystem, rec)
			} else {
				err = render.Rows(&want, format, rec, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := mustRun(t, "", "read", dir, "public.orders", "--changes", "--from", fmt.Sprint(iv.from), "--to", fmt.Sprint(iv.to), "--format", format)
			if format == "arrow" {
				// One batch or several: the same rows.
				got, w := arrowRowsCSV(t, got), arrowRowsCSV(t, want.String())
				if got != w {
					t.Errorf("changes (%d, %d] as arrow: rows\n%s\nwant\n%s", iv.from, iv.to, got, w)
				}
				continue
			}
			if got != want.String() {
				t.Errorf("changes (%d, %d] as %s:\n%q\nwant\n%q", iv.from, iv.to, format, got, want.String())
			}
		}
		rec.Release()
	}
}

// arrowRowsCSV renders the rows of every batch of an Arrow IPC stream as
// CSV, as one table.
func arrowRowsCSV(t *testing.T, stream string) string {
	t.Helper()
	r, err := ipc.NewReader(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var out bytes.Buffer
	text, err := render.NewStream(&out, "csv", r.Schema().Fields())
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		if err := text.Write(r.Record(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if err := text.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
