package ingest

import (
	"context"
	"log/slog"
	"time"

	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// rebuildKeyState fills st with the collection in sh as of durable-1 (a
// stream resumes from durable), a batch at a time, and logs its size:
// keys, bytes (replicate.KeyState.Bytes) and bytes per key. attrs are
// more attributes of the log line.
func rebuildKeyState(ctx context.Context, log *slog.Logger, timeline, name string, sh *store.Shard, durable uint64, st *replicate.KeyState, attrs ...any) error {
	began := time.Now()
	if durable > 0 {
		err := sh.ScanAsOf(ctx, durable-1, st.ResetState, st.AddState)
		if err == nil {
			err = st.EndState()
		}
		if err != nil {
			return err
		}
	}
	perKey := 0
	if st.Len() > 0 {
		perKey = st.Bytes() / st.Len()
	}
	args := append([]any{"source", timeline, "collection", name}, attrs...)
	log.Info("key state rebuilt from the store", append(args, "keys", st.Len(), "bytes", st.Bytes(), "bytes_per_key", perKey,
		"as_of", max(durable, 1)-1, "took", time.Since(began).Round(time.Millisecond).String())...)
	return nil
}
