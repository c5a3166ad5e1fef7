package snapshot

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// dials are a snapshot's replication connection (it exports the
// snapshot) and copy connections, connected in the background from the
// snapshot's start, at the same time as each other and as the catalog
// reads: a connection takes several round trips (TCP, startup,
// authentication), which a far server makes slow.
type dials struct {
	repl    *dial
	workers []*dial
}

type dial struct {
	done chan struct{}
	conn *pgx.Conn
	err  error
}

func startDials(ctx context.Context, cfg Config) *dials {
	d := &dials{}
	replUp := cfg.Upstream.With(func(c *pgx.ConnConfig) { c.RuntimeParams["replication"] = "database" })
	d.repl = startDial(func() (*pgx.Conn, error) {
		c, err := replUp.Connect(ctx)
		if err != nil {
			return nil, fmt.Errorf("open replication connection: %w", err)
		}
		return c, nil
	})
	copyUp := cfg.Upstream.With(pgarrow.ConfigureSession)
	for range cfg.Parallel {
		d.workers = append(d.workers, startDial(func() (*pgx.Conn, error) {
			c, err := copyUp.Connect(ctx)
			if err != nil {
				return nil, fmt.Errorf("open copy connection: %w", err)
			}
			return c, nil
		}))
	}
	return d
}

func startDial(connect func() (*pgx.Conn, error)) *dial {
	d := &dial{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.conn, d.err = connect()
	}()
	return d
}

// wait returns the connection; the caller owns it from then on.
func (d *dial) wait() (*pgx.Conn, error) {
	<-d.done
	c := d.conn
	d.conn = nil
	return c, d.err
}

// close closes the connections not taken.
func (d *dials) close() {
	for _, x := range append([]*dial{d.repl}, d.workers...) {
		<-x.done
		if x.conn != nil {
			x.conn.Close(context.Background())
			x.conn = nil
		}
	}
}
