package store

import (
	"errors"
	"fmt"
)

// UpperMismatchError is returned by a compare-and-append whose expected
// upper is not the shard's upper: another writer committed first, or the
// caller's view is stale, or a replayed interval differs from what is
// durable. Callers detect it with errors.As.
type UpperMismatchError struct {
	Collection string
	// Expected is the upper the caller expected.
	Expected uint64
	// Actual is the shard's upper when the append was refused.
	Actual uint64
	// Reason says why, when it is not just a different upper (for example
	// "replayed interval differs from the durable contents").
	Reason string
}

func (e *UpperMismatchError) Error() string {
	msg := fmt.Sprintf("append %s: expected upper %d but the shard's upper is %d", e.Collection, e.Expected, e.Actual)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	switch {
	case e.Reason != "":
		msg += "; another writer may own this collection, stop it or start from the store's upper"
	case e.Expected > e.Actual:
		msg += "; the store is behind the writer (was the store directory replaced?); restart the writer from the store's upper"
	default:
		msg += "; another writer appended first; re-read the upper and retry"
	}
	return msg
}

// NotReadableError is returned by a read at a time outside the shard's
// readable range [Since, Upper).
type NotReadableError struct {
	Collection string
	// Op is "read" or "changes".
	Op string
	// Time is the time asked for (for changes, the offending end).
	Time  uint64
	Since uint64
	Upper uint64
}

func (e *NotReadableError) Error() string {
	if e.Upper == 0 || e.Since >= e.Upper {
		return fmt.Sprintf("%s %s as of %d: not readable; nothing is durable yet (upper is %d); wait for an append", e.Op, e.Collection, e.Time, e.Upper)
	}
	return fmt.Sprintf("%s %s as of %d: not readable; readable times are [%d, %d)", e.Op, e.Collection, e.Time, e.Since, e.Upper)
}

// DefiniteError is a definite error recorded in a shard with AppendError:
// every read at or after Time fails with it, forever.
type DefiniteError struct {
	Collection string
	Time       uint64
	Message    string
}

func (e *DefiniteError) Error() string {
	return fmt.Sprintf("collection %s has a definite error at time %d: %s", e.Collection, e.Time, e.Message)
}

// SchemaMismatchError is returned when a batch's columns differ from the
// schema of the collection's generation its times fall in.
type SchemaMismatchError struct {
	Collection string
	Detail     string
	// Generation is the start of the generation whose schema the batch
	// was compared with, when InGeneration.
	Generation   uint64
	InGeneration bool
}

func (e *SchemaMismatchError) Error() string {
	which := ""
	if e.InGeneration {
		which = fmt.Sprintf(" (here the generation from time %d)", e.Generation)
	}
	return fmt.Sprintf("append %s: schema mismatch: %s; a batch must have the schema of the generation its times fall in%s; after a schema change upstream, start a new generation at its time, or convert the batch", e.Collection, e.Detail, which)
}

// SchemaChangedError is returned by Changes over an interval (From, To]
// in which a generation with another schema starts, at At: one result
// cannot hold both schemas.
type SchemaChangedError struct {
	Collection string
	From, To   uint64
	At         uint64
}

func (e *SchemaChangedError) Error() string {
	return fmt.Sprintf("changes of %s in (%d, %d]: the schema changes at %d (a generation with other columns starts there); read the changes up to %d, then the contents as of %d and the changes after it (rtrctl read --changes --to %d; --as-of %d; --changes --from %d)",
		e.Collection, e.From, e.To, e.At, e.At-1, e.At, e.At-1, e.At, e.At)
}

// ErrNotFound is returned (wrapped) when a collection or source does not
// exist.
var ErrNotFound = errors.New("not found")

// ErrInvalid is wrapped by errors about malformed arguments (bad times,
// bad uppers, unsupported types).
var ErrInvalid = errors.New("invalid argument")

// CorruptError reports a store file that fails its checksum or cannot be
// decoded.
type CorruptError struct {
	Path   string
	Detail string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt store file %s: %s; restore the directory from a backup or re-ingest the collection", e.Path, e.Detail)
}
