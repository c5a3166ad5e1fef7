package replicate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// streamErr runs StreamPG to its end (at most 20 s) and returns its error.
func streamErr(t *testing.T, cfg replicate.PGConfig) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := replicate.StreamPG(ctx, cfg, newRecSink())
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StreamPG = %v, want a definite error", err)
	}
	return err
}

// wantErr checks that err's message and hint contain the given texts and
// that no password leaks.
func wantErr(t *testing.T, err error, pg *testenv.Postgres, msg, hintText string) {
	t.Helper()
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("error %q does not contain %q", err, msg)
	}
	if h := hint.Of(err); !strings.Contains(h, hintText) {
		t.Errorf("hint %q does not contain %q (error %q)", h, hintText, err)
	}
	if strings.Contains(err.Error()+hint.Of(err), pg.Password) {
		t.Errorf("error leaks the password: %q", err)
	}
}

func TestReplicateErrors(t *testing.T) {
	pg := testenv.SharedPostgres(t)

	t.Run("publication missing", func(t *testing.T) {
		d := newDB(t, pg, abSetup)
		cfg := d.cfg()
		cfg.Publication = "nopub"
		wantErr(t, streamErr(t, cfg), pg, `publication "nopub": publication does not exist in database`, `CREATE PUBLICATION nopub FOR TABLE`)
	})
	t.Run("replica identity not full", func(t *testing.T) {
		d := newDB(t, pg, abSetup+"CREATE TABLE plain (id int PRIMARY KEY); CREATE TABLE \"Odd Name\" (x int);")
		wantErr(t, streamErr(t, d.cfg()), pg, `replica identity is not FULL for public."Odd Name" (DEFAULT), public.plain (DEFAULT) in publication pub`,
			`run: ALTER TABLE public."Odd Name" REPLICA IDENTITY FULL; ALTER TABLE public.plain REPLICA IDENTITY FULL;`)
	})
	t.Run("slot missing", func(t *testing.T) {
		d := newDB(t, pg, abSetup)
		cfg := d.cfg()
		cfg.Slot = "rtr_no_such_slot"
		wantErr(t, streamErr(t, cfg), pg, `replication slot does not exist: "rtr_no_such_slot"`,
			`run 'rtrctl snapshot' (it creates the slot), or create it: SELECT pg_create_logical_replication_slot('rtr_no_such_slot', 'pgoutput');`)
	})
	t.Run("slot in use", func(t *testing.T) {
		d := newDB(t, pg, abSetup)
		sink := newRecSink()
		r := start(t, d.cfg(), sink)
		waitFor(t, "the first reader", func() bool { return sink.upper() != 0 })
		wantErr(t, streamErr(t, d.cfg()), pg, `replication slot is in use: "`+d.slot+`" is read by another connection (pid `, "stop the other reader")
		r.failIfDone(t)
	})
	t.Run("start before the slot", func(t *testing.T) {
		d := newDB(t, pg, abSetup)
		cfg := d.cfg()
		cfg.StartLSN = d.confirmed(t) - 1
		wantErr(t, streamErr(t, cfg), pg, "replication slot is past the start position", "re-snapshot")
	})
	t.Run("bad slot name", func(t *testing.T) {
		d := newDB(t, pg, abSetup)
		cfg := d.cfg()
		cfg.Slot = "Bad-Name"
		wantErr(t, streamErr(t, cfg), pg, `bad slot name "Bad-Name"`, "a-z, 0-9 and _")
	})
	t.Run("publication dropped while streaming", func(t *testing.T) {
		d := newDB(t, pg, abSetup)
		sink := newRecSink()
		r := start(t, d.cfg(), sink)
		waitFor(t, "start", func() bool { return sink.upper() != 0 })
		d.exec(t, "DROP PUBLICATION pub")
		d.exec(t, "INSERT INTO a VALUES (1, 'x')")
		select {
		case err := <-r.done:
			r.done <- err
			wantErr(t, err, pg, `publication "pub" does not exist`, "CREATE PUBLICATION pub")
		case <-time.After(15 * time.Second):
			t.Fatal("StreamPG did not fail")
		}
	})
}

func TestReplicateWalLevel(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PostgresOptions{WalLevel: "replica"})
	dsn := pg.CreateDatabase(t)
	err := streamErr(t, replicate.PGConfig{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub", Slot: "rtr_x"})
	wantErr(t, err, pg, `wal_level is "replica", but logical replication needs wal_level=logical`, "ALTER SYSTEM SET wal_level = logical")
}

func TestReplicateSlotInvalidated(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PostgresOptions{Settings: map[string]string{"max_slot_wal_keep_size": "1MB", "wal_keep_size": "0"}})
	d := newDB(t, pg, abSetup)
	// Write past the slot's allowance and checkpoint: the slot's WAL is
	// removed and it is invalidated.
	for i := 0; i < 4; i++ {
		d.exec(t, "INSERT INTO a SELECT g, repeat('x', 100) FROM generate_series(1, 100) g ON CONFLICT DO NOTHING")
		d.exec(t, "SELECT pg_switch_wal()")
	}
	d.exec(t, "CHECKPOINT")
	var status string
	if err := d.conn.QueryRow(t.Context(), "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", d.slot).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "lost" {
		t.Fatalf("wal_status = %q after the checkpoint, want lost", status)
	}
	wantErr(t, streamErr(t, d.cfg()), pg, `replication slot has been invalidated: "`+d.slot+`" (wal_status lost)`, "re-snapshot with 'rtrctl snapshot'")
}
