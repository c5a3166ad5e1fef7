package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// ErrOwned is wrapped by CheckOwner's error: the collection belongs to
// another source.
var ErrOwned = errors.New("collection belongs to another source")

// ownedError says who owns a collection; it wraps ErrOwned without
// repeating it in the message.
type ownedError struct{ msg string }

func (e *ownedError) Error() string { return e.msg }
func (e *ownedError) Unwrap() error { return ErrOwned }

// CheckOwner returns nil when collection does not exist yet or belongs to
// source (its schema metadata's rtr.source, pipe.KeySource), and an error
// wrapping ErrOwned naming the owner otherwise, with a hint. A collection
// without rtr.source belongs to no source, so to none that asks.
func (s *Store) CheckOwner(ctx context.Context, collection, source string) error {
	if source == "" {
		return fmt.Errorf("check owner of collection %s: no source given: %w", collection, ErrInvalid)
	}
	sh, err := s.Shard(ctx, collection)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check owner of collection %s: %w", collection, err)
	}
	owner, _ := sh.Schema().Metadata().GetValue(pipe.KeySource)
	switch owner {
	case source:
		return nil
	case "":
		return hint.Wrap(&ownedError{fmt.Sprintf("collection %s in %s belongs to no source (its schema has no %s)", collection, s.loc, pipe.KeySource)},
			"ingest it into another store, or remove it")
	}
	return hint.Wrap(&ownedError{fmt.Sprintf("collection %s in %s belongs to source %q", collection, s.loc, owner)},
		fmt.Sprintf("a collection has one source: ingest it into another store, or pass --source-id %s to resume that source", owner))
}
