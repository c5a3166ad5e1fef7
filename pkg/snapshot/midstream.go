package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// Copy copies cfg.Tables at a snapshot exported now (a temporary slot's
// consistent point), without the permanent slot and without a rewind:
// the rows go to sink at time 0 with diff +1, and Copy returns the
// snapshot LSN S (the copy holds exactly the transactions whose commit
// LSN is below S) and the tables as the copy read them. An ingest
// re-snapshots a collection in the middle of its stream with it: the
// changes the stream brings between the collection's reset and S are
// taken back from the copy there (pkg/ingest). cfg.Slot is not used.
// Copy ends with a transaction of its own, so that the server's WAL is
// flushed past S.
func Copy(ctx context.Context, cfg Config, sink pipe.Sink) (frontier.LSN, []*pgarrow.Table, error) {
	began := time.Now()
	cfg = cfg.withDefaults()
	if cfg.Upstream == nil {
		return 0, nil, errors.New("snapshot copy: no upstream given")
	}
	dl := startDials(ctx, cfg)
	defer dl.close()
	conn, err := cfg.Upstream.Connect(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("snapshot copy: %w", err)
	}
	defer conn.Close(context.Background())
	tables, err := loadTables(ctx, conn, cfg, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("snapshot copy: %w", err)
	}
	snapLSN, _, err := copyTables(ctx, cfg, dl, conn, 0, tables, sink, began, "")
	if err != nil {
		return 0, nil, fmt.Errorf("snapshot copy: %w", err)
	}
	// The server sends a slot's stream only as far as its WAL is flushed,
	// and S may be beyond that until something commits: a transaction of
	// its own (an empty logical message, which pgoutput does not pass on)
	// flushes it, so the stream reaches S now.
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_logical_emit_message(true, 'rtrctl', 'copy')"); err != nil {
		return 0, nil, fmt.Errorf("snapshot copy: flush the WAL past %s: %w", snapLSN, err)
	}
	out := make([]*pgarrow.Table, len(tables))
	for i, tb := range tables {
		out[i] = tb.t
	}
	return snapLSN, out, nil
}
