package probe

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
)

// Retention is what an upstream keeps for a source to resume from: how
// far behind the source may fall before the upstream drops what it
// needs.
type Retention struct {
	// Slot is the PostgreSQL replication slot.
	Slot string `json:"slot,omitempty"`
	// RetainedBytes is the WAL the slot holds back: the current WAL write
	// position minus the slot's restart_lsn.
	RetainedBytes *uint64 `json:"retained_wal_bytes,omitempty"`
	// WALStatus is the slot's wal_status: reserved, extended, unreserved
	// (about to be removed past max_slot_wal_keep_size) or lost.
	WALStatus string `json:"wal_status,omitempty"`
	// SafeWALSize is how many more bytes of WAL can be written before the
	// slot is in danger of being lost; nil when max_slot_wal_keep_size is
	// unlimited (-1).
	SafeWALSize *int64 `json:"safe_wal_size,omitempty"`
	// BinlogRetentionSeconds is how long a MySQL/MariaDB server keeps a
	// binary log file after its last write (binlog_expire_logs_seconds or
	// expire_logs_days); nil when binlogs never expire.
	BinlogRetentionSeconds *float64 `json:"binlog_retention_seconds,omitempty"`
}

// Retainer is a Prober that also reads what the upstream retains for a
// source.
type Retainer interface {
	// Retention reads it for the source whose upstream is described by
	// info, as the ingest records it (store.SourceInfo.Upstream: a
	// PostgreSQL source's "slot").
	Retention(ctx context.Context, info map[string]string) (Retention, error)
}

// Retention reads the slot's row of pg_replication_slots.
func (p *Postgres) Retention(ctx context.Context, info map[string]string) (Retention, error) {
	slot := info["slot"]
	if slot == "" {
		return Retention{}, errors.New("postgres retention: the source records no replication slot")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connect(ctx); err != nil {
		return Retention{}, err
	}
	r := Retention{Slot: slot}
	var retained, safe *int64
	var status *string
	err := p.conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status, safe_wal_size
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, slot).Scan(&retained, &status, &safe)
	if errors.Is(err, pgx.ErrNoRows) {
		return Retention{}, hint.Wrap(fmt.Errorf("postgres retention: replication slot %q does not exist", slot),
			"the next rtrctl ingest of the source creates it and snapshots again")
	}
	if err != nil {
		p.drop()
		return Retention{}, fmt.Errorf("postgres retention of slot %s: %w", slot, err)
	}
	if retained != nil && *retained >= 0 {
		b := uint64(*retained)
		r.RetainedBytes = &b
	}
	if status != nil {
		r.WALStatus = *status
	}
	r.SafeWALSize = safe
	return r, nil
}

// Retention reads the server's binary log expiry.
func (m *MySQL) Retention(ctx context.Context, _ map[string]string) (Retention, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.connect(ctx); err != nil {
		return Retention{}, err
	}
	// binlog_expire_logs_seconds: MySQL 8.0, MariaDB 10.6; it wins over
	// expire_logs_days when not 0.
	var secs float64
	r, err := m.execute(ctx, "SELECT @@global.binlog_expire_logs_seconds")
	if err == nil {
		v, _ := r.GetInt(0, 0)
		secs = float64(v)
	}
	if secs == 0 {
		r, err = m.execute(ctx, "SELECT @@global.expire_logs_days")
		if err != nil {
			return Retention{}, fmt.Errorf("mysql retention: %w", err)
		}
		days, _ := r.GetFloat(0, 0)
		if days == 0 {
			if v, _ := r.GetInt(0, 0); v != 0 {
				days = float64(v)
			}
		}
		secs = math.Round(days * 86400)
	}
	if secs <= 0 {
		return Retention{}, nil
	}
	return Retention{BinlogRetentionSeconds: &secs}, nil
}
