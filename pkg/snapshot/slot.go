package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// slotName is what PostgreSQL accepts as a replication slot name.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// ErrSlot is wrapped by errors about the permanent replication slot: a bad
// name, or a slot that exists but is not a pgoutput slot of this database.
var ErrSlot = errors.New("unusable replication slot")

// CheckSlotName fails unless name is a valid replication slot name.
func CheckSlotName(name string) error {
	if !slotName.MatchString(name) {
		return hint.Wrap(fmt.Errorf("check slot name %q: %w: slot names are 1 to 63 characters a-z, 0-9 and _", name, ErrSlot),
			"pick a slot name such as rtr_orders")
	}
	return nil
}

// EnsureSlot makes sure the permanent logical replication slot name
// (plugin pgoutput) exists in conn's database, creating it if missing, and
// returns its start: its confirmed_flush_lsn. created says whether this
// call created it. Every transaction whose commit record starts before the
// returned LSN is already applied to the tables; every later one will be
// streamed from the slot.
func EnsureSlot(ctx context.Context, conn *pgx.Conn, name string) (start frontier.LSN, created bool, err error) {
	if err := CheckSlotName(name); err != nil {
		return 0, false, err
	}
	start, found, err := readSlot(ctx, conn, name)
	if err != nil || found {
		return start, false, err
	}
	_, err = conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name)
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42710") { // duplicate_object: created meanwhile
		err = fmt.Errorf("create replication slot %s: %w", name, err)
		if h := upstream.PrivilegeHint(err, conn.Config().User, conn.Config().Database); h != "" {
			err = hint.Wrap(err, h)
		}
		return 0, false, err
	}
	created = err == nil
	start, found, err = readSlot(ctx, conn, name)
	if err == nil && !found {
		err = fmt.Errorf("create replication slot %s: %w: it vanished right after it was created", name, ErrSlot)
	}
	return start, created, err
}

// readSlot returns the confirmed_flush_lsn of slot name, checking that it
// is a permanent pgoutput slot of conn's database.
func readSlot(ctx context.Context, conn *pgx.Conn, name string) (frontier.LSN, bool, error) {
	b := &pgx.Batch{}
	r := queueSlot(b, name)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return 0, false, fmt.Errorf("read replication slot %s: %w", name, err)
	}
	return r.result()
}

// slotRow is a slot's row of pg_replication_slots, read by a batch.
type slotRow struct {
	name                      string
	found                     bool
	plugin, slotType, db, cur string
	confirmed                 *string
	temporary                 bool
}

// queueSlot queues readSlot's query on b; result says what it found once
// the batch is read.
func queueSlot(b *pgx.Batch, name string) *slotRow {
	r := &slotRow{name: name}
	b.Queue(`SELECT coalesce(plugin, ''), slot_type, coalesce(database, ''), temporary,
		confirmed_flush_lsn::text, current_database()
		FROM pg_replication_slots WHERE slot_name = $1`, name).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			r.found = true
			if err := rows.Scan(&r.plugin, &r.slotType, &r.db, &r.temporary, &r.confirmed, &r.cur); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	return r
}

func (r *slotRow) result() (frontier.LSN, bool, error) {
	if !r.found {
		return 0, false, nil
	}
	name, plugin, slotType, db, curDB, confirmed, temporary := r.name, r.plugin, r.slotType, r.db, r.cur, r.confirmed, r.temporary
	switch {
	case slotType != "logical" || plugin != "pgoutput":
		return 0, true, hint.Wrap(fmt.Errorf("read replication slot %s: %w: it is a %s slot with plugin %q, not a logical pgoutput slot", name, ErrSlot, slotType, plugin),
			fmt.Sprintf("use another --slot, or drop this one: SELECT pg_drop_replication_slot('%s')", name))
	case db != curDB:
		return 0, true, hint.Wrap(fmt.Errorf("read replication slot %s: %w: it belongs to database %q, not %q", name, ErrSlot, db, curDB),
			"use another --slot name: a logical slot serves one database")
	case temporary:
		return 0, true, fmt.Errorf("read replication slot %s: %w: it is a temporary slot of another session", name, ErrSlot)
	case confirmed == nil:
		return 0, true, fmt.Errorf("read replication slot %s: %w: it has no confirmed_flush_lsn", name, ErrSlot)
	}
	lsn, err := frontier.ParseLSN(*confirmed)
	if err != nil {
		return 0, true, fmt.Errorf("read replication slot %s: %w", name, err)
	}
	return lsn, true, nil
}

// exportedSnapshot is a snapshot pinned to an LSN: the temporary slot
// that made it lives as long as conn, and the snapshot can be imported
// (SET TRANSACTION SNAPSHOT) until conn runs its next command.
type exportedSnapshot struct {
	conn *pgconn.PgConn
	slot string
	name string       // for SET TRANSACTION SNAPSHOT
	lsn  frontier.LSN // the temporary slot's consistent point
}

// exportSnapshot creates a temporary logical slot on the replication
// connection conn with EXPORT_SNAPSHOT, or the permanent slot permanent
// when it is not "" (its confirmed_flush_lsn is then the consistent
// point). Its snapshot sees exactly the transactions whose commit records
// start before its consistent point.
func exportSnapshot(ctx context.Context, conn *pgconn.PgConn, permanent string) (*exportedSnapshot, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("export snapshot: %w", err)
	}
	name, kind := "rtr_snap_"+hex.EncodeToString(b[:]), "temporary"
	if permanent != "" {
		name, kind = permanent, "permanent"
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: permanent == "", Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return nil, fmt.Errorf("export snapshot: create %s slot %s: %w", kind, name, err)
	}
	lsn, err := frontier.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, fmt.Errorf("export snapshot: consistent point of %s: %w", name, err)
	}
	if res.SnapshotName == "" {
		return nil, fmt.Errorf("export snapshot: temporary slot %s exported no snapshot", name)
	}
	return &exportedSnapshot{conn: conn, slot: name, name: res.SnapshotName, lsn: lsn}, nil
}

// dropSlot drops the permanent slot name, waiting a while for a reader
// that just went away (a killed ingest's walsender) to let go of it.
func dropSlot(ctx context.Context, conn *pgx.Conn, name string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", name)
		var pgErr *pgconn.PgError
		if err == nil || errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object: gone already
			return nil
		}
		if !(errors.As(err, &pgErr) && pgErr.Code == "55006") || time.Now().After(deadline) { // object_in_use
			return fmt.Errorf("drop replication slot %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
