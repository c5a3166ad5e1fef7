package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// Errors a caller may want to tell apart (errors.Is). Each comes wrapped
// with a hint naming the statement that fixes it.
var (
	// ErrNoPublication: the publication does not exist.
	ErrNoPublication = errors.New("publication does not exist")
	// ErrNotInPublication: a requested table is not in the publication.
	ErrNotInPublication = errors.New("table is not in the publication")
	// ErrNoTable: a requested table does not exist.
	ErrNoTable = errors.New("table does not exist")
	// ErrNoTables: there is nothing to snapshot.
	ErrNoTables = errors.New("no tables to snapshot")
	// ErrReplicaIdentity: a table's REPLICA IDENTITY is not FULL, so its
	// updates and deletes cannot be rewound.
	ErrReplicaIdentity = errors.New("replica identity is not FULL")
)

// relName is a table by its exact schema and name.
type relName = pgarrow.TableName

// publicationTables returns the tables of publication pub, sorted, in
// one round trip, with the server's wal_level checked. It fails with
// ErrNoPublication when pub does not exist.
func publicationTables(ctx context.Context, conn *pgx.Conn, pub string) ([]relName, error) {
	// One row without a publication, and one of NULLs for a publication
	// without tables.
	rows, err := conn.Query(ctx, `SELECT s.level, p.pubname IS NOT NULL, pt.schemaname::text, pt.tablename::text
		FROM (SELECT pg_catalog.current_setting('wal_level') AS level) s
		LEFT JOIN pg_catalog.pg_publication p ON p.pubname = $1
		LEFT JOIN pg_catalog.pg_publication_tables pt ON pt.pubname = p.pubname`, pub)
	if err != nil {
		return nil, fmt.Errorf("read publication %s: %w", pub, err)
	}
	exists := false
	level := ""
	var out []relName
	for rows.Next() {
		var schema, name *string
		if err := rows.Scan(&level, &exists, &schema, &name); err != nil {
			return nil, fmt.Errorf("read publication %s: %w", pub, err)
		}
		if schema != nil && name != nil {
			out = append(out, relName{Schema: *schema, Name: *name})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read publication %s: %w", pub, err)
	}
	if err := probe.CheckWALLevel(level); err != nil {
		return nil, err
	}
	if !exists {
		return nil, hint.Wrap(fmt.Errorf("read publication %s: %w", pub, ErrNoPublication),
			fmt.Sprintf("run: CREATE PUBLICATION %s FOR TABLE schema.table, ...  (or FOR ALL TABLES)", pgarrow.QuoteIdent(pub)))
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Schema < out[j].Schema || out[i].Schema == out[j].Schema && out[i].Name < out[j].Name
	})
	return out, nil
}

// resolveTables picks and describes the tables to snapshot: want (names
// as pgarrow.ParseTableName reads them, e.g. orders, public.orders,
// public."Odd Name", or collection names), or all of the publication when
// want is empty. Every table must be in the publication. It takes two
// round trips however many tables there are.
func resolveTables(ctx context.Context, conn *pgx.Conn, pub string, want []string) ([]relName, []*pgarrow.Table, error) {
	inPub, err := publicationTables(ctx, conn, pub)
	if err != nil {
		return nil, nil, err
	}
	if len(want) == 0 {
		if len(inPub) == 0 {
			return nil, nil, hint.Wrap(fmt.Errorf("resolve tables: %w: publication %s has no tables", ErrNoTables, pub),
				fmt.Sprintf("run: ALTER PUBLICATION %s ADD TABLE schema.table", pgarrow.QuoteIdent(pub)))
		}
		tabs, err := pgarrow.LoadTables(ctx, conn, inPub)
		if err != nil {
			return nil, nil, fmt.Errorf("describe tables: %w", err)
		}
		return inPub, tabs, nil
	}
	var names []relName
	for _, w := range want {
		n, err := pgarrow.ParseTableName(w)
		if err != nil {
			return nil, nil, fmt.Errorf("resolve tables: %w", err)
		}
		names = append(names, n)
	}
	tabs, err := pgarrow.LoadTables(ctx, conn, names)
	if err != nil {
		// Say what is wrong as checking them one by one does.
		if err := checkTables(ctx, conn, pub, inPub, names); err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("describe tables: %w", err)
	}
	member := map[relName]bool{}
	for _, r := range inPub {
		member[r] = true
	}
	var rels []relName
	var out []*pgarrow.Table
	seen := map[relName]bool{}
	for _, t := range tabs {
		r := t.TableName()
		if !member[r] {
			return nil, nil, notInPublication(r, pub)
		}
		if !seen[r] {
			seen[r] = true
			rels, out = append(rels, r), append(out, t)
		}
	}
	return rels, out, nil
}

// checkTables looks the tables named up one by one and returns the error
// of the first that does not exist or is not in the publication.
func checkTables(ctx context.Context, conn *pgx.Conn, pub string, inPub, names []relName) error {
	member := map[relName]bool{}
	for _, r := range inPub {
		member[r] = true
	}
	for _, n := range names {
		var r relName
		oid, err := pgarrow.LookupTable(ctx, conn, n)
		if errors.Is(err, pgarrow.ErrTableNotFound) {
			return fmt.Errorf("resolve table %s: %w: %w", n, ErrNoTable, err)
		}
		if err != nil {
			return fmt.Errorf("resolve table %s: %w", n, err)
		}
		err = conn.QueryRow(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, oid).Scan(&r.Schema, &r.Name)
		if err != nil {
			return fmt.Errorf("resolve table %s: %w", n, err)
		}
		if !member[r] {
			return notInPublication(r, pub)
		}
	}
	return nil
}

func notInPublication(r relName, pub string) error {
	return hint.Wrap(fmt.Errorf("resolve table %s: %w %s", r, ErrNotInPublication, pub),
		fmt.Sprintf("run: ALTER PUBLICATION %s ADD TABLE %s", pgarrow.QuoteIdent(pub), r.SQL()))
}

// replicaIdentityError lists the tables whose replica identity is not
// FULL, with the statements that fix them.
// With keyed, bad are the tables without a key (NOTHING, DEFAULT without a
// primary key).
func replicaIdentityError(bad []relName, idents []string, keyed bool) error {
	var names, fixes []string
	for i, r := range bad {
		names = append(names, fmt.Sprintf("%s is %s", r, strings.ToUpper(idents[i])))
		fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL;", r.SQL()))
	}
	if keyed {
		return hint.Wrap(fmt.Errorf("check tables: %w: %s (updates and deletes need the whole old row or a key)", ErrReplicaIdentity, strings.Join(names, ", ")),
			"run: "+strings.Join(fixes, " ")+" (or give them a primary key)")
	}
	return hint.Wrap(fmt.Errorf("check tables: %w: %s (updates and deletes need the whole old row)", ErrReplicaIdentity, strings.Join(names, ", ")),
		"run: "+strings.Join(fixes, " ")+" (or use 'rtrctl ingest', which handles DEFAULT and USING INDEX tables with a key)")
}
