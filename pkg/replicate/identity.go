package replicate

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// Identity is a table's replica identity as the catalog has it now.
type Identity struct {
	Schema, Name string
	// Kind is "full", "default", "index" or "nothing".
	Kind string
	// Key is the identity's key columns, in attribute order: the primary
	// key's (DEFAULT) or the index's (USING INDEX); empty under FULL and
	// NOTHING, and under DEFAULT without a primary key.
	Key []string
}

// QualifiedName is the table's collection name (docs/naming.md).
func (id Identity) QualifiedName() string { return pgarrow.CollectionName(id.Schema, id.Name) }

// Keyless reports whether updates and deletes of the table do not say
// which row they change: no FULL identity and no key.
func (id Identity) Keyless() bool { return id.Kind != "full" && len(id.Key) == 0 }

func (id Identity) describe(keyed bool) string {
	if keyed && id.Kind == "default" && len(id.Key) == 0 {
		return "DEFAULT without a primary key"
	}
	return strings.ToUpper(id.Kind)
}

func (id Identity) quoted() string {
	return pgarrow.TableName{Schema: id.Schema, Name: id.Name}.SQL()
}

// LoadIdentities reads the replica identity of every table of
// publication, sorted by name.
func LoadIdentities(ctx context.Context, conn *pgx.Conn, publication string) ([]Identity, error) {
	b := &pgx.Batch{}
	ids := QueueIdentities(b, publication)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("read replica identities of publication %s: %w", publication, err)
	}
	return *ids, nil
}

// QueueIdentities queues LoadIdentities' query on b, for a caller that
// sends it with others in one round trip; the result is set when the
// batch is read.
func QueueIdentities(b *pgx.Batch, publication string) *[]Identity {
	out := new([]Identity)
	b.Queue(`SELECT n.nspname::text, c.relname::text, c.relreplident::text,
			coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum)
				FROM pg_catalog.pg_index i
				JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
				WHERE i.indrelid = c.oid AND CASE c.relreplident WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END),
				'{}')
		FROM pg_catalog.pg_publication_tables pt
		JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		WHERE pt.pubname = $1 ORDER BY 1, 2`, publication).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id Identity
			var kind string
			if err := rows.Scan(&id.Schema, &id.Name, &kind, &id.Key); err != nil {
				return err
			}
			id.Kind = pgarrow.ReplicaIdentityName(kind[0])
			*out = append(*out, id)
		}
		return rows.Err()
	})
	return out
}

// CheckIdentities refuses tables whose changes cannot be replicated
// exactly: with keyed, those without a key (NOTHING, DEFAULT without a
// primary key); without it, every table that is not FULL. The error wraps
// errReplicaIdentity and names the fix.
func CheckIdentities(ids []Identity, keyed bool, publication string) error {
	var names, fixes []string
	for _, id := range ids {
		if id.Kind == "full" || keyed && !id.Keyless() {
			continue
		}
		names = append(names, fmt.Sprintf("%s (%s)", id.QualifiedName(), id.describe(keyed)))
		fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL;", id.quoted()))
	}
	if len(names) == 0 {
		return nil
	}
	if keyed {
		return hint.Wrap(fmt.Errorf("%w for %s in publication %s, and they have no key: updates and deletes would not say which row they change",
			errReplicaIdentity, strings.Join(names, ", "), publication), "run: "+strings.Join(fixes, " ")+" (or give them a primary key)")
	}
	return hint.Wrap(fmt.Errorf("%w for %s in publication %s: updates and deletes would lack the old row",
		errReplicaIdentity, strings.Join(names, ", "), publication),
		"run: "+strings.Join(fixes, " ")+" (or use 'rtrctl ingest', which keeps the current row of every key of DEFAULT and USING INDEX tables)")
}
