package pgarrow

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Catalog reads take a fixed number of round trips whatever the number of
// tables and columns: the tables with their columns and format_type in one
// query, the column types with every element and base type they lead to
// (arrays, domains over domains) in another, both sent at once (a pgx
// batch: one round trip on a connection that does not prepare, two on
// one that does).

// wantedByName matches tables by the arrays $1 (schemas, "" for the one
// visible on the search_path) and $2 (names); wantedByOID by $1 (oids).
// Each row's i is its position in the arrays, from 1.
const (
	wantedByName = `SELECT w.i, c.oid, n.nspname::text AS nsp, c.relname::text AS rel, c.relkind::text AS kind, c.relreplident::text AS ident
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY w(nsp, rel, i)
		JOIN pg_catalog.pg_class c ON c.relname = w.rel
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE CASE WHEN w.nsp = '' THEN pg_catalog.pg_table_is_visible(c.oid) ELSE n.nspname = w.nsp END`
	wantedByOID = `SELECT w.i, c.oid, n.nspname::text AS nsp, c.relname::text AS rel, c.relkind::text AS kind, c.relreplident::text AS ident
		FROM unnest($1::oid[]) WITH ORDINALITY w(o, i)
		JOIN pg_catalog.pg_class c ON c.oid = w.o
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace`
	wantedByPublication = `SELECT row_number() OVER (ORDER BY pt.schemaname::text, pt.tablename::text) AS i,
			c.oid, n.nspname::text AS nsp, c.relname::text AS rel, c.relkind::text AS kind, c.relreplident::text AS ident
		FROM pg_catalog.pg_publication_tables pt
		JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		WHERE pt.pubname = $1`
	// wantedColumns are the columns of the wanted tables that COPY and
	// pgoutput carry.
	wantedColumns = `JOIN pg_catalog.pg_attribute a ON a.attrelid = w.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''`
)

// tablesSQL lists the wanted tables, one row per column (a table without
// columns has one row of NULLs), in the order wanted.
func tablesSQL(wanted string) string {
	return `WITH w AS (` + wanted + `)
		SELECT w.i, w.oid, w.nsp, w.rel, w.kind, w.ident,
			a.attname::text, a.atttypid, a.atttypmod, a.attnotnull, pg_catalog.format_type(a.atttypid, a.atttypmod)
		FROM w LEFT ` + wantedColumns + `
		ORDER BY w.i, a.attnum`
}

// typesSQL returns the pg_type rows of the types seed selects and of
// every element and base type they lead to.
func typesSQL(with, seed string) string {
	return `WITH RECURSIVE ` + with + ` seed(oid) AS (` + seed + `),
		t(oid) AS (SELECT oid FROM seed
			UNION SELECT v.x FROM t JOIN pg_catalog.pg_type y ON y.oid = t.oid
			CROSS JOIN LATERAL (VALUES (y.typelem), (y.typbasetype)) v(x) WHERE v.x <> 0)
		SELECT y.oid, y.typtype::text, y.typcategory::text, y.typelem, y.typbasetype, y.typtypmod
		FROM t JOIN pg_catalog.pg_type y ON y.oid = t.oid`
}

// queueTypes queues the pg_type query of typesSQL on b, filling r's cache.
func (r *TypeResolver) queueTypes(b *pgx.Batch, sql string, args ...any) {
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var oid uint32
			var typtype, category string
			var tr typeRow
			if err := rows.Scan(&oid, &typtype, &category, &tr.elem, &tr.base, &tr.typtypmod); err != nil {
				return fmt.Errorf("look up types: %w", err)
			}
			tr.typtype, tr.category = typtype[0], category[0]
			r.cache[oid] = tr
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("look up types: %w", err)
		}
		return nil
	})
}

// LoadTables reads the tables named, in that order, as LoadTableByName
// reads each (a name without a schema is the table visible on the
// search_path), in one round trip: what loading each would give, and the
// first error loading them one by one would give.
func LoadTables(ctx context.Context, conn *pgx.Conn, names []TableName) ([]*Table, error) {
	schemas, rels := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		schemas[i], rels[i] = n.Schema, n.Name
	}
	tabs, kinds, err := loadTables(ctx, conn, len(names), wantedByName, schemas, rels)
	if err != nil {
		return nil, err
	}
	for i, t := range tabs {
		if t == nil {
			// Not found: LookupTable says so with its hints (near misses).
			if _, err := LookupTable(ctx, conn, names[i]); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("load table %s: %w (it appeared meanwhile)", names[i], ErrTableNotFound)
		}
		if t.ReplicaIdentity == "" {
			return nil, fmt.Errorf("load table %s: %w", names[i], notTable(t, kinds[i]))
		}
	}
	return tabs, nil
}

// LoadPublicationTables reads every table of publication pub, sorted by
// schema and name, in one round trip; none when pub has no tables or
// does not exist.
func LoadPublicationTables(ctx context.Context, conn *pgx.Conn, pub string) ([]*Table, error) {
	tabs, _, err := loadTables(ctx, conn, -1, wantedByPublication, pub)
	if err != nil {
		return nil, fmt.Errorf("load tables of publication %s: %w", pub, err)
	}
	return tabs, nil
}

// LoadTablesByOID reads the tables with these pg_class oids, in that
// order, in one round trip, as LoadTableByOID reads each.
func LoadTablesByOID(ctx context.Context, conn *pgx.Conn, oids []uint32) ([]*Table, error) {
	tabs, kinds, err := loadTables(ctx, conn, len(oids), wantedByOID, oids)
	if err != nil {
		return nil, err
	}
	for i, t := range tabs {
		if t == nil {
			return nil, fmt.Errorf("load table oid %d: %w", oids[i], ErrTableNotFound)
		}
		if t.ReplicaIdentity == "" {
			return nil, notTable(t, kinds[i])
		}
	}
	return tabs, nil
}

// notTable is the error of relation t of kind kind, not a table.
func notTable(t *Table, kind string) error {
	return fmt.Errorf("load table %s: relation kind %q is not a table: %w", t.QualifiedName(), kind, ErrTableNotFound)
}

// loadTables runs the batch: the tables wanted (n of them, by args; -1:
// as many as found) and their types. A table not found is nil; a
// relation that is not a table has no columns and no replica identity,
// and its kind in kinds.
func loadTables(ctx context.Context, conn *pgx.Conn, n int, wanted string, args ...any) ([]*Table, []string, error) {
	out, kinds := make([]*Table, max(n, 0)), make([]string, max(n, 0))
	if n == 0 {
		return out, kinds, nil
	}
	r := NewTypeResolver(conn)
	b := &pgx.Batch{}
	b.Queue(tablesSQL(wanted), args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i int
			var oid uint32
			var schema, name, kind, ident string
			var col struct {
				name     *string
				typ      *uint32
				mod      *int32
				notNull  *bool
				typeName *string
			}
			if err := rows.Scan(&i, &oid, &schema, &name, &kind, &ident, &col.name, &col.typ, &col.mod, &col.notNull, &col.typeName); err != nil {
				return err
			}
			for i > len(out) {
				out, kinds = append(out, nil), append(kinds, "")
			}
			t := out[i-1]
			if t == nil {
				t = &Table{Schema: schema, Name: name, OID: oid}
				if kind == "r" || kind == "p" {
					t.ReplicaIdentity = ReplicaIdentityName(ident[0])
				}
				out[i-1], kinds[i-1] = t, kind
			}
			if col.name == nil || t.ReplicaIdentity == "" {
				continue
			}
			t.Columns = append(t.Columns, Column{Name: *col.name, TypeOID: *col.typ, TypeMod: *col.mod, NotNull: *col.notNull, TypeName: *col.typeName})
		}
		return rows.Err()
	})
	r.queueTypes(b, typesSQL(`w AS (`+wanted+`),`, `SELECT a.atttypid FROM w `+wantedColumns), args...)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, fmt.Errorf("load tables: %w", err)
	}
	for _, t := range out {
		if t == nil || t.ReplicaIdentity == "" {
			continue
		}
		if err := r.resolve(ctx, t.Columns); err != nil {
			return nil, nil, fmt.Errorf("load columns of %s: %w", t.QualifiedName(), err)
		}
	}
	return out, kinds, nil
}

// Resolve fills TypeName, ElemOID, IsEnum, BaseOID and BaseTypeMod of each
// column from its TypeOID and TypeMod, in one round trip for all of them
// (none when every type is cached and no column needs a name).
func (r *TypeResolver) Resolve(ctx context.Context, cols []Column) error {
	if len(cols) == 0 {
		return nil
	}
	oids, mods := make([]uint32, len(cols)), make([]int32, len(cols))
	for i, c := range cols {
		oids[i], mods[i] = c.TypeOID, c.TypeMod
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_catalog.format_type(u.o, u.m) FROM unnest($1::oid[], $2::int4[]) WITH ORDINALITY u(o, m, i) ORDER BY u.i`, oids, mods).Query(func(rows pgx.Rows) error {
		i := 0
		for rows.Next() {
			if i >= len(cols) {
				return errors.New("format_type: more rows than columns")
			}
			if err := rows.Scan(&cols[i].TypeName); err != nil {
				return err
			}
			i++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if i != len(cols) {
			return errors.New("format_type: fewer rows than columns")
		}
		return nil
	})
	var missing []uint32
	for _, o := range oids {
		if _, ok := r.cache[o]; !ok {
			missing = append(missing, o)
		}
	}
	if len(missing) > 0 {
		r.queueTypes(b, typesSQL("", `SELECT unnest($1::oid[])`), missing)
	}
	if err := r.conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("look up types of columns: %w", err)
	}
	return r.resolve(ctx, cols)
}
