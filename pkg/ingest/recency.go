package ingest

import (
	"context"
	"log/slog"
	"sync"

	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// serveRecency starts the recency server of one source on socket
// (pkg/recency, docs/real-time-recency.md). Its state is the reclocker's,
// read under mu (the lock the ingest holds around rc), minting a binding
// at once when a waiter asks; nudge, when not nil, asks the change stream for
// progress. A server that cannot start is logged, not
// fatal (wait-recent then probes the upstream itself): the result is nil.
func serveRecency(ctx context.Context, st *store.Store, source, socket string, p probe.Prober,
	mu *sync.Mutex, rc *reclock.Reclocker, w *storeWriter, nudge func(), log *slog.Logger) *recency.Server {
	srv, err := recency.StartServer(ctx, recency.ServerConfig{Store: st, Source: source, Socket: socket, Prober: p, Logger: log,
		State: func(ctx context.Context, mint bool) (recency.State, error) {
			mu.Lock()
			defer mu.Unlock()
			if mint {
				if err := rc.Tick(ctx, true); err != nil {
					return recency.State{}, err
				}
			}
			return recency.State{Bindings: rc.Bindings(), Progress: rc.Progress(), Durable: w.DurableUpper()}, nil
		},
		Nudge: nudge,
	})
	if err != nil {
		log.Warn("recency server not started; wait-recent works without it", "source", source, "error", err)
		return nil
	}
	return srv
}
