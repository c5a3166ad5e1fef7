package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// TestStartupRoundTrips: behind a proxy adding 50 ms each way (a server
// in another region), an ingest of 1 or of 100 tables is readable after
// at most maxStartupRoundTrips round trips, however many tables, and
// every wait-recent (the first included) takes one round trip.
//
// Round trips are counted by the proxy's round-trip clock
// (servers.Proxy.RoundTrips), which counts what the client waited for on
// the network and not local work, so the bounds hold on a loaded
// machine; the wall-clock times are logged next to them
// (docs/benchmarks.md has both). A server of its own keeps other tests'
// WAL out of the stream's way.
func TestStartupRoundTrips(t *testing.T) {
	const (
		oneWay               = 50 * time.Millisecond
		maxStartupRoundTrips = 15
	)
	pg := testenv.StartPostgres(t, testenv.PostgresOptions{})
	for _, n := range []int{1, 100} {
		t.Run(fmt.Sprint(n, "tables"), func(t *testing.T) {
			u := rrNewUpstreamOn(t, pg, "t0")
			var ddl []string
			for i := 1; i < n; i++ {
				ddl = append(ddl, fmt.Sprintf("CREATE TABLE t%d (id int PRIMARY KEY, note text); ALTER TABLE t%d REPLICA IDENTITY FULL; ALTER PUBLICATION pub ADD TABLE t%d", i, i, i))
			}
			if len(ddl) > 0 {
				execAll(t, u.conn, strings.Join(ddl, "; "))
			}
			u.proxy.SetLatency(oneWay)
			dir := t.TempDir()
			start := time.Now()
			rt0 := u.proxy.RoundTrips()
			rrRunIngest(t, u, dir, "pg", "rtr_rt_"+rrRandom())
			last := fmt.Sprintf("public.t%d", n-1)
			for !rrReadable(t, dir, last) {
				if time.Since(start) > time.Minute {
					t.Fatalf("%s not readable after a minute", last)
				}
				time.Sleep(5 * time.Millisecond)
			}
			d, rt := time.Since(start), u.proxy.RoundTrips()-rt0
			t.Logf("%d tables: readable after %d round trips (%v; %.1f round trips of %v)", n, rt, d.Round(time.Millisecond), float64(d)/float64(2*oneWay), 2*oneWay)
			if rt > maxStartupRoundTrips {
				t.Errorf("%d tables: readable after %d round trips, want at most %d", n, rt, maxStartupRoundTrips)
			}
			// Each wait-recent probes on the daemon's warm connection (it
			// opens none) while the stream, running, reports its position:
			// one round trip, then the ingest's local lag until the binding
			// that covers the probe is durable. A call whose binding the
			// ingest minted meanwhile (the first) is timed up to that
			// binding (the binding's time is the ingest's clock): after it,
			// the wait is the ingest's commit (100 collections on a busy
			// machine), during which the stream's status updates and the
			// publication polls move the proxy's clock too. The others are
			// answered by a binding minted before: one round trip.
			for i := range 4 {
				start, rt0, conns := time.Now(), u.proxy.RoundTrips(), u.proxy.Accepted()
				at, stderr, code := rrWaitRecent(t, dir, "pg", "daemon", "", "--timeout", "30s")
				if code != exitOK {
					t.Fatalf("wait-recent %d: exit %d: %s", i, code, stderr)
				}
				d, rt := time.Since(start), u.proxy.RoundTrips()-rt0
				if c := u.proxy.Accepted() - conns; c > 0 {
					t.Errorf("wait-recent %d opened %d connections upstream, want none (a warm probe)", i, c)
				}
				minted := time.UnixMilli(int64(at))
				if !minted.Before(start.Truncate(time.Millisecond)) {
					toBinding := minted.Sub(start)
					t.Logf("wait-recent %d: %v, binding minted after %v, then the ingest's lag %v", i, d.Round(time.Millisecond), toBinding, (d - toBinding).Round(time.Millisecond))
					if bound := 2*oneWay + 50*time.Millisecond; toBinding > bound {
						t.Errorf("wait-recent %d: the binding that answered was minted %v after the call began, want at most one round trip (+50 ms): %v", i, toBinding, bound)
					}
					continue
				}
				t.Logf("wait-recent %d: %d round trips (%v)", i, rt, d.Round(time.Millisecond))
				if rt > 1 {
					t.Errorf("wait-recent %d took %d round trips, want 1", i, rt)
				}
			}
		})
	}
}

// rrReadable reports whether collection has an upper in the store in dir.
func rrReadable(t *testing.T, dir, collection string) bool {
	if _, err := os.Stat(dir); err != nil {
		return false
	}
	st, err := store.Open(t.Context(), dir, store.Options{MustExist: true})
	if err != nil {
		return false
	}
	sh, err := st.Shard(t.Context(), collection)
	if err != nil {
		return false
	}
	info, err := sh.Info(t.Context())
	return err == nil && info.Upper > 0
}
