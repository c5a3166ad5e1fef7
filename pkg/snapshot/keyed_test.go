package snapshot

import (
	"errors"
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// TestKeyedIdentity snapshots a table with REPLICA IDENTITY DEFAULT (its
// primary key) beside a FULL one, with KeyedIdentity: a slot the snapshot
// creates is made with the copy's snapshot (nothing to rewind); against an
// older slot, inserted rows and their later changes are rewound exactly;
// a change to a row older than the slot fails with ErrRewind and a hint,
// unless Recreate makes the slot again.
func TestKeyedIdentity(t *testing.T) {
	dsn, conn := testDB(t, 50)
	ctx := t.Context()
	mustExec(t, conn, "ALTER TABLE items REPLICA IDENTITY DEFAULT")
	up := upstream.MustParsePostgres(dsn)

	t.Run("refused without KeyedIdentity", func(t *testing.T) {
		_, err := PG(ctx, Config{Upstream: up, Publication: "pub", Slot: uniqueSlot(t, conn)}, newMemSink())
		if !errors.Is(err, ErrReplicaIdentity) || !strings.Contains(err.Error(), "public.items is DEFAULT") || !strings.Contains(hint.Of(err), "rtrctl ingest") {
			t.Errorf("err = %v (hint %q)", err, hint.Of(err))
		}
	})

	t.Run("new slot", func(t *testing.T) {
		res, sink := takeSnapshot(t, Config{Upstream: up, Publication: "pub", Slot: uniqueSlot(t, conn), KeyedIdentity: true})
		if !res.SlotCreated || res.SlotLSN != res.SnapshotLSN || res.Rewound() != 0 {
			t.Errorf("slot created %v at %s, snapshot at %s, %d rewound: want a slot made with the copy's snapshot", res.SlotCreated, res.SlotLSN, res.SnapshotLSN, res.Rewound())
		}
		for _, tb := range []string{"items", "other"} {
			if d := diffRows(sink.rows["public."+tb], tableRows(t, ctx, conn, tb)); d != "" {
				t.Errorf("%s:\n%s", tb, d)
			}
		}
	})

	slot := uniqueSlot(t, conn)
	mustExec(t, conn, "SELECT pg_create_logical_replication_slot('"+slot+"', 'pgoutput')")
	at0 := map[string]map[string]int64{"items": tableRows(t, ctx, conn, "items"), "other": tableRows(t, ctx, conn, "other")}
	t.Run("rows inserted after the slot", func(t *testing.T) {
		mustExec(t, conn, `INSERT INTO items SELECT i, 'new', i, big_value() FROM generate_series(100, 110) i;
			UPDATE items SET v = 'newer' WHERE id BETWEEN 100 AND 105; UPDATE items SET id = id + 100 WHERE id BETWEEN 104 AND 107;
			DELETE FROM items WHERE id IN (100, 204); UPDATE other SET v = 'changed' WHERE id <= 10; DELETE FROM other WHERE id = 11`)
		res, sink := takeSnapshot(t, Config{Upstream: up, Publication: "pub", Slot: slot, KeyedIdentity: true})
		if res.SlotCreated || res.Rewound() == 0 {
			t.Errorf("slot created %v, %d rewound", res.SlotCreated, res.Rewound())
		}
		for _, tb := range []string{"items", "other"} {
			if d := diffRows(sink.rows["public."+tb], at0[tb]); d != "" {
				t.Errorf("%s as of the slot:\n%s", tb, d)
			}
		}
	})
	t.Run("a row older than the slot changed", func(t *testing.T) {
		mustExec(t, conn, "UPDATE items SET n = n + 1 WHERE id = 3")
		_, err := PG(ctx, Config{Upstream: up, Publication: "pub", Slot: slot, KeyedIdentity: true}, newMemSink())
		if !errors.Is(err, ErrRewind) || !strings.Contains(err.Error(), "key (id)=(3)") || !strings.Contains(hint.Of(err), "pg_drop_replication_slot('"+slot+"')") {
			t.Errorf("err = %v (hint %q)", err, hint.Of(err))
		}
	})
	t.Run("recreate", func(t *testing.T) {
		res, sink := takeSnapshot(t, Config{Upstream: up, Publication: "pub", Slot: slot, KeyedIdentity: true, Recreate: true})
		if !res.SlotCreated || res.SlotLSN != res.SnapshotLSN || res.Rewound() != 0 {
			t.Errorf("slot created %v at %s, snapshot at %s, %d rewound", res.SlotCreated, res.SlotLSN, res.SnapshotLSN, res.Rewound())
		}
		if d := diffRows(sink.rows["public.items"], tableRows(t, ctx, conn, "items")); d != "" {
			t.Errorf("items:\n%s", d)
		}
	})
	t.Run("no key", func(t *testing.T) {
		mustExec(t, conn, "CREATE TABLE nokey (id int); CREATE PUBLICATION pub3 FOR TABLE items, nokey")
		_, err := PG(ctx, Config{Upstream: up, Publication: "pub3", Slot: uniqueSlot(t, conn), KeyedIdentity: true}, newMemSink())
		if !errors.Is(err, ErrReplicaIdentity) || !strings.Contains(err.Error(), "public.nokey is DEFAULT WITHOUT A PRIMARY KEY") ||
			!strings.Contains(hint.Of(err), "ALTER TABLE public.nokey REPLICA IDENTITY FULL; (or give them a primary key)") || strings.Contains(err.Error(), "items") {
			t.Errorf("err = %v (hint %q)", err, hint.Of(err))
		}
	})
}
