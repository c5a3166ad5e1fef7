package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
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

// QuoteIdent quotes a PostgreSQL identifier only when it needs quoting,
// so that hints read the way people write SQL: public.orders, but
// public."Order Lines".
func QuoteIdent(s string) string {
	plain := s != ""
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '$')) {
			plain = false
			break
		}
	}
	if plain && !reserved[s] {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// reserved are the SQL key words that cannot be bare table or schema
// names in PostgreSQL (a small, common subset; anything else bare is fine).
var reserved = map[string]bool{
	"all": true, "analyse": true, "analyze": true, "and": true, "any": true, "array": true, "as": true, "asc": true,
	"both": true, "case": true, "cast": true, "check": true, "collate": true, "column": true, "constraint": true,
	"create": true, "default": true, "desc": true, "distinct": true, "do": true, "else": true, "end": true,
	"except": true, "false": true, "for": true, "foreign": true, "from": true, "grant": true, "group": true,
	"having": true, "in": true, "into": true, "limit": true, "not": true, "null": true, "offset": true, "on": true,
	"only": true, "or": true, "order": true, "primary": true, "references": true, "select": true, "table": true,
	"then": true, "to": true, "true": true, "union": true, "unique": true, "user": true, "using": true,
	"when": true, "where": true, "with": true,
}

// quoteQualified quotes schema.name for SQL and hints.
func quoteQualified(schema, name string) string { return QuoteIdent(schema) + "." + QuoteIdent(name) }

// relName is a table by schema and name.
type relName struct{ schema, name string }

func (r relName) String() string { return r.schema + "." + r.name }
func (r relName) sql() string    { return quoteQualified(r.schema, r.name) }

// publicationTables returns the tables of publication pub, sorted. It
// fails with ErrNoPublication when pub does not exist.
func publicationTables(ctx context.Context, conn *pgx.Conn, pub string) ([]relName, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read publication %s: %w", pub, err)
	}
	if !exists {
		return nil, hint.Wrap(fmt.Errorf("read publication %s: %w", pub, ErrNoPublication),
			fmt.Sprintf("run: CREATE PUBLICATION %s FOR TABLE schema.table, ...  (or FOR ALL TABLES)", QuoteIdent(pub)))
	}
	rows, err := conn.Query(ctx, "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1", pub)
	if err != nil {
		return nil, fmt.Errorf("read publication %s: %w", pub, err)
	}
	var out []relName
	for rows.Next() {
		var r relName
		if err := rows.Scan(&r.schema, &r.name); err != nil {
			return nil, fmt.Errorf("read publication %s: %w", pub, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read publication %s: %w", pub, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// resolveTables picks the tables to snapshot: want (names as SQL would
// resolve them, e.g. orders, public.orders, "Odd Name"), or all of the
// publication when want is empty. Every table must be in the publication.
func resolveTables(ctx context.Context, conn *pgx.Conn, pub string, want []string) ([]relName, error) {
	inPub, err := publicationTables(ctx, conn, pub)
	if err != nil {
		return nil, err
	}
	if len(want) == 0 {
		if len(inPub) == 0 {
			return nil, hint.Wrap(fmt.Errorf("resolve tables: %w: publication %s has no tables", ErrNoTables, pub),
				fmt.Sprintf("run: ALTER PUBLICATION %s ADD TABLE schema.table", QuoteIdent(pub)))
		}
		return inPub, nil
	}
	member := map[relName]bool{}
	for _, r := range inPub {
		member[r] = true
	}
	var out []relName
	seen := map[relName]bool{}
	for _, w := range want {
		var r relName
		err := conn.QueryRow(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, w).Scan(&r.schema, &r.name)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, hint.Wrap(fmt.Errorf("resolve table %q: %w", w, ErrNoTable),
				"check --tables: names resolve like SQL, e.g. orders, public.orders or '\"Odd Name\"'")
		}
		if err != nil {
			return nil, fmt.Errorf("resolve table %q: %w", w, err)
		}
		if !member[r] {
			return nil, hint.Wrap(fmt.Errorf("resolve table %s: %w %s", r, ErrNotInPublication, pub),
				fmt.Sprintf("run: ALTER PUBLICATION %s ADD TABLE %s", QuoteIdent(pub), r.sql()))
		}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out, nil
}

// replicaIdentityError lists the tables whose replica identity is not
// FULL, with the statements that fix them.
// With keyed, bad are the tables without a key (NOTHING, DEFAULT without a
// primary key).
func replicaIdentityError(bad []relName, idents []string, keyed bool) error {
	var names, fixes []string
	for i, r := range bad {
		names = append(names, fmt.Sprintf("%s is %s", r, strings.ToUpper(idents[i])))
		fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL;", r.sql()))
	}
	if keyed {
		return hint.Wrap(fmt.Errorf("check tables: %w: %s (updates and deletes need the whole old row or a key)", ErrReplicaIdentity, strings.Join(names, ", ")),
			"run: "+strings.Join(fixes, " ")+" (or give them a primary key)")
	}
	return hint.Wrap(fmt.Errorf("check tables: %w: %s (updates and deletes need the whole old row)", ErrReplicaIdentity, strings.Join(names, ", ")),
		"run: "+strings.Join(fixes, " ")+" (or use 'rtrctl ingest', which handles DEFAULT and USING INDEX tables with a key)")
}
