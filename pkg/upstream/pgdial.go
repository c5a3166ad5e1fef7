package upstream

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Dial is a connection being opened in the background (ConnectLater): a
// connection takes several round trips (TCP, startup, authentication),
// which a far server makes slow, so a caller that will need one starts it
// early, while it does other things.
type Dial struct {
	done chan struct{}
	once sync.Once
	conn *pgx.Conn
	err  error
}

// ConnectLater starts Connect in the background.
func (p *Postgres) ConnectLater(ctx context.Context) *Dial {
	d := &Dial{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.conn, d.err = p.Connect(ctx)
	}()
	return d
}

// Wait returns the connection (the caller owns it) or Connect's error;
// a second call returns nil, nil.
func (d *Dial) Wait() (*pgx.Conn, error) {
	<-d.done
	var c *pgx.Conn
	var err error
	d.once.Do(func() { c, err = d.conn, d.err })
	return c, err
}

// Close closes the connection unless Wait took it, once it is open.
func (d *Dial) Close() {
	go func() {
		if c, _ := d.Wait(); c != nil {
			c.Close(context.Background())
		}
	}()
}
