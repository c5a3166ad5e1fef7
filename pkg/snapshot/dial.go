package snapshot

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// dials are a snapshot's replication connection (it exports the
// snapshot; with the session settings, so that a stream can go on on it)
// and copy connections, connected in the background from the snapshot's
// start, at the same time as each other and as the catalog reads.
type dials struct {
	repl    *upstream.Dial
	workers []*upstream.Dial
}

func startDials(ctx context.Context, cfg Config) *dials {
	replUp := cfg.Upstream.With(func(c *pgx.ConnConfig) {
		pgarrow.ConfigureSession(c)
		c.RuntimeParams["replication"] = "database"
	})
	d := &dials{repl: replUp.ConnectLater(ctx)}
	copyUp := cfg.Upstream.With(pgarrow.ConfigureSession)
	for range cfg.Parallel {
		d.workers = append(d.workers, copyUp.ConnectLater(ctx))
	}
	return d
}

func (d *dials) replication() (*pgx.Conn, error) {
	c, err := d.repl.Wait()
	if err != nil {
		return nil, fmt.Errorf("open replication connection: %w", err)
	}
	return c, nil
}

func (d *dials) worker(i int) (*pgx.Conn, error) {
	c, err := d.workers[i].Wait()
	if err != nil {
		return nil, fmt.Errorf("open copy connection: %w", err)
	}
	return c, nil
}

// close closes the connections not taken.
func (d *dials) close() {
	d.repl.Close()
	for _, w := range d.workers {
		w.Close()
	}
}
