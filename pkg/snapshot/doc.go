// Package snapshot produces definite snapshots of upstream tables: every
// row at source time 0, with contents that do not depend on when the
// snapshot was taken.
//
// For PostgreSQL (PG), time 0 holds each table exactly as of the start of
// a permanent logical replication slot (its confirmed_flush_lsn,
// slot_lsn). The copy itself runs later, against a snapshot pinned to the
// consistent point of a temporary slot (snapshot_lsn), on several
// connections that share it through an exported snapshot; the changes
// between slot_lsn and snapshot_lsn are then read from the permanent slot
// (without confirming it) and emitted negated, which rewinds the copy to
// slot_lsn. docs/snapshot.md gives the details and the exact boundary.
package snapshot
