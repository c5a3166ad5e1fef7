package main

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// TestReplicateAckStore: with --ack-store the slot follows the store's
// durable frontier of the source, never beyond it; without it the slot
// never moves.
func TestReplicateAckStore(t *testing.T) {
	fx, db := newPGBank(t)
	slot := db.newSlotName(t)
	start := db.createSlot(t, slot)
	writer := ingesttest.StartWriter(t, fx, bankLog(fx.Layout("pg")), ingesttest.WriterOptions{Pause: 2 * time.Millisecond})
	bin := rtrctlBin(t)
	dir := t.TempDir() + "/store"
	if _, err := store.Open(ctxT(t), dir, store.Options{}); err != nil {
		t.Fatal(err)
	}
	pipeline := func(script string) {
		t.Helper()
		cmd := exec.Command("bash", "-o", "pipefail", "-c", script)
		cmd.Env = append(os.Environ(), "RTR="+bin, "RTR_PG_DSN="+db.dsn, "STORE="+dir, "SLOT="+slot)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	pipeline(`"$RTR" snapshot --source pg --publication rtr --slot "$SLOT" | "$RTR" reclock --store "$STORE" | "$RTR" store append "$STORE"`)
	time.Sleep(300 * time.Millisecond)

	// Without --ack-store: the slot stays where it was.
	stop := frontierJSONOf(t, "--source", "pg", "--dsn", db.dsn).Native
	pipeline(`"$RTR" replicate --source pg --publication rtr --slot "$SLOT" --status-interval 100ms --stop-at ` + stop + ` | "$RTR" reclock --store "$STORE" | "$RTR" store append "$STORE"`)
	if got := db.slotConfirmed(t, slot); got != start {
		t.Fatalf("replicate without --ack-store moved the slot from %s to %s", start, got)
	}

	// With --ack-store, while the writer runs: replicate for 4 s (store
	// append commits a group every second, so the store's durable frontier
	// moves several times), then SIGINT. The slot advances, and is not
	// beyond what the store holds durably.
	script := `timeout -s INT 4 "$RTR" replicate --source pg --publication rtr --slot "$SLOT" --status-interval 50ms --ack-store "$STORE" | "$RTR" reclock --store "$STORE" | "$RTR" store append "$STORE"`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "RTR="+bin, "RTR_PG_DSN="+db.dsn, "STORE="+dir, "SLOT="+slot)
	out, err := cmd.CombinedOutput()
	writer.Halt(t)
	if err != nil { // the pipeline's status is store append's: it must end cleanly
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	durable, err := durablePos(ctxT(t), dir, "pg")
	if err != nil {
		t.Fatal(err)
	}
	confirmed := db.slotConfirmed(t, slot)
	if confirmed > durable {
		t.Fatalf("slot confirmed %s is beyond the store's durable frontier %s", confirmed, durable)
	}
	if confirmed <= start {
		t.Fatalf("with --ack-store the slot did not advance from %s (store durable to %s)", start, durable)
	}
	t.Logf("slot start %s, confirmed %s, store durable %s", start, confirmed, durable)
}
