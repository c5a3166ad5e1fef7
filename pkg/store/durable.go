package store

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// DurableFrontier returns the source frontier below which every collection
// of source is durable in the store: the frontier of the last binding at a
// system time below the least upper of the source's collections. It is
// what may be acknowledged upstream (a replication slot's confirmed flush
// position): nothing below it can be lost. With no collections or no
// bindings it is the empty frontier of the bindings' domain (domain ""
// when the source has no bindings).
func (s *Store) DurableFrontier(ctx context.Context, source string) (frontier.Frontier, error) {
	bs, _, err := s.Bindings(ctx, source)
	if errors.Is(err, ErrNotFound) || (err == nil && len(bs) == 0) {
		return frontier.Frontier{}, nil
	}
	if err != nil {
		return frontier.Frontier{}, fmt.Errorf("durable frontier of %s: %w", source, err)
	}
	domain := bs[0].Frontier.Domain()
	colls, err := s.SourceCollections(ctx, source)
	if err != nil {
		return frontier.Frontier{}, fmt.Errorf("durable frontier of %s: %w", source, err)
	}
	if len(colls) == 0 {
		return frontier.Empty(domain), nil
	}
	least, err := s.LeastUpper(ctx, colls)
	if err != nil {
		return frontier.Frontier{}, fmt.Errorf("durable frontier of %s: %w", source, err)
	}
	k := sort.Search(len(bs), func(i int) bool { return bs[i].Time >= least })
	if k == 0 {
		return frontier.Empty(domain), nil
	}
	return bs[k-1].Frontier, nil
}

// LeastUpper returns the least upper over collections, refreshing each
// shard from the store: every update of every one of them at a time below
// it is durable. It is 0 when one of them has no shard yet, or collections
// is empty.
func (s *Store) LeastUpper(ctx context.Context, collections []string) (uint64, error) {
	var least uint64
	for i, c := range collections {
		sh, err := s.Shard(ctx, c) // re-reads the manifest when it moved
		if errors.Is(err, ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("least upper: %w", err)
		}
		if u := sh.Upper(); i == 0 || u < least {
			least = u
		}
	}
	return least, nil
}
