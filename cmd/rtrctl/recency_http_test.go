package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// TestWaitRecentHTTP: an ingest started with a recency address answers
// wait-recent over loopback HTTP when its socket is gone, with a correct
// time.
func TestWaitRecentHTTP(t *testing.T) {
	u := rrNewUpstream(t, "things")
	dir := t.TempDir()
	st, err := store.Open(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	slot := "rtr_http_" + rrRandom()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		done <- ingest.Run(ctx, ingest.NewPG(ingest.PGConfig{
			Upstream: upstream.MustParsePostgres(u.ingestDSN()), Publication: "pub", Slot: slot, Source: "pg", Logger: log,
		}), st, ingest.Options{CompactEvery: -1, RecencyAddr: "127.0.0.1:0", Logger: log})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ingest: %v", err)
		}
		u.conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot)
	})
	rrWaitReady(t, dir, "pg")
	info, err := st.ReadSourceInfo("pg")
	if err != nil || info.HTTP == "" {
		t.Fatalf("source info %+v, %v: want an http address", info, err)
	}
	if err := os.Remove(recency.SocketPath(dir, "pg")); err != nil {
		t.Fatal(err)
	}
	u.insert(t, u.conn, 1, 7)
	out, stderr, code := runCLI(t, "", "wait-recent", "--store", dir, "--timeout", "20s", "--output", "json")
	if code != exitOK {
		t.Fatalf("wait-recent: exit %d: %s", code, stderr)
	}
	var res recency.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if res.Via != "daemon-http" {
		t.Fatalf("answered via %q, want daemon-http", res.Via)
	}
	if got := rrReadIDs(t, dir, u.table, res.Time); !rrIsPrefix(got, 7) {
		t.Fatalf("read as of %d: %v, want exactly 1..7", res.Time, got)
	}
}
