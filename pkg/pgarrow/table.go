// Package pgarrow maps PostgreSQL tables to Arrow: a table's columns to
// typed Arrow fields, and rows in PostgreSQL's text output form (what
// pgoutput's 't' tuple columns and COPY ... TO in text format carry, after
// COPY's unescaping) to Arrow arrays.
//
// The type mapping and the text-form parsing rules are specified in
// docs/types-postgres.md. Types without a dedicated mapping (geometric
// types, ranges, money, bit strings, network addresses, ...) become utf8
// holding PostgreSQL's text output, so no table is refused for its types.
//
// The parsers expect the output styles that SessionParams sets (ISO
// DateStyle, postgres IntervalStyle, hex bytea); connections that produce
// the text (replication and COPY) should use ConfigureSession.
package pgarrow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
)

// MetaType is the Arrow field metadata key that holds the column's
// PostgreSQL type, as format_type prints it ("integer", "numeric(10,2)",
// "jsonb", "text[]", "character varying(20)", an enum's name).
const MetaType = "pg.type"

// SessionParams are the run-time parameters under which PostgreSQL prints
// values in the forms this package parses. They are sent in the startup
// packet, so they apply to replication connections (pgoutput formats
// values in the walsender) as well as to COPY.
var SessionParams = map[string]string{
	"datestyle":          "ISO, MDY",
	"intervalstyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "3",
}

// ConfigureSession adds SessionParams to cfg's run-time parameters.
func ConfigureSession(cfg *pgx.ConnConfig) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for k, v := range SessionParams {
		cfg.RuntimeParams[k] = v
	}
}

// Column is one column of a table.
type Column struct {
	Name     string
	TypeOID  uint32 // pg_attribute.atttypid
	TypeMod  int32  // pg_attribute.atttypmod (-1: none)
	TypeName string // format_type(TypeOID, TypeMod)
	NotNull  bool
	// ElemOID is the element type of an array column (a domain element
	// resolved to its base type); 0 for non-arrays.
	ElemOID uint32
	// IsEnum is set when the column's type (or its array element type) is
	// an enum.
	IsEnum bool
	// BaseOID and BaseTypeMod are the base type of a domain column (domains
	// over domains resolved); BaseOID is 0 for non-domains.
	BaseOID     uint32
	BaseTypeMod int32
}

// SameType reports whether c and o have the same name, type and type
// modifier: the parts a replication Relation message carries.
func (c Column) SameType(o Column) bool {
	return c.Name == o.Name && c.TypeOID == o.TypeOID && c.TypeMod == o.TypeMod
}

// Table is a table's identity and its columns, in attribute order, without
// dropped and generated columns (neither COPY nor pgoutput carries them).
type Table struct {
	Schema, Name string
	OID          uint32
	Columns      []Column
	// ReplicaIdentity is "default", "nothing", "full" or "index".
	ReplicaIdentity string
}

// QualifiedName is the table's collection name, CollectionName(Schema,
// Name): public.orders, public."RelMix", "a.b".c.
func (t *Table) QualifiedName() string { return CollectionName(t.Schema, t.Name) }

// TableName is the table's schema and name.
func (t *Table) TableName() TableName { return TableName{Schema: t.Schema, Name: t.Name} }

// QuotedName is schema.table for SQL, each part quoted where it needs it
// (public.orders, "My Schema"."Orders").
func (t *Table) QuotedName() string { return QuoteIdent(t.Schema) + "." + QuoteIdent(t.Name) }

// Fields returns the Arrow fields of the table's columns: typed as
// docs/types-postgres.md says, nullable unless the column is NOT NULL, with
// the PostgreSQL type name in the field metadata under MetaType.
func (t *Table) Fields() []arrow.Field {
	fs := make([]arrow.Field, len(t.Columns))
	for i, c := range t.Columns {
		fs[i] = arrow.Field{
			Name:     c.Name,
			Type:     columnConv(c).typ,
			Nullable: !c.NotNull,
			Metadata: arrow.NewMetadata([]string{MetaType}, []string{c.TypeName}),
		}
	}
	return fs
}

// ReplicaIdentityName maps pg_class.relreplident (and the pgoutput
// Relation message's replica identity byte) to a name.
func ReplicaIdentityName(c byte) string {
	switch c {
	case 'd':
		return "default"
	case 'n':
		return "nothing"
	case 'f':
		return "full"
	case 'i':
		return "index"
	}
	return fmt.Sprintf("unknown(%q)", c)
}

// ErrTableNotFound is wrapped by LoadTable when there is no such table.
var ErrTableNotFound = errors.New("table not found")

// LoadTable reads a table's columns and replica identity from pg_catalog.
// name is read by ParseTableName (public.orders, public."RelMix",
// "a.b".c; a name without a schema is looked up on the search_path, as
// SQL would): a collection name reads back as exactly its table.
func LoadTable(ctx context.Context, conn *pgx.Conn, name string) (*Table, error) {
	n, err := ParseTableName(name)
	if err != nil {
		return nil, fmt.Errorf("load table: %w", err)
	}
	return LoadTableByName(ctx, conn, n)
}

// LoadTableByName reads the table whose schema and name are exactly n's
// (no case folding); with no schema, the one visible on the search_path.
func LoadTableByName(ctx context.Context, conn *pgx.Conn, n TableName) (*Table, error) {
	t, err := LoadTables(ctx, conn, []TableName{n})
	if err != nil {
		return nil, err
	}
	return t[0], nil
}

// LookupTable returns the pg_class.oid of the table (or other relation)
// named exactly n; with no schema, of the one visible on the search_path.
// It fails with ErrTableNotFound (and a hint naming near misses that
// differ in case only) when there is none.
func LookupTable(ctx context.Context, conn *pgx.Conn, n TableName) (uint32, error) {
	var oid uint32
	var err error
	if n.Schema == "" {
		err = conn.QueryRow(ctx, `SELECT c.oid FROM pg_catalog.pg_class c
			WHERE c.relname = $1 AND pg_catalog.pg_table_is_visible(c.oid)`, n.Name).Scan(&oid)
	} else {
		err = conn.QueryRow(ctx, `SELECT c.oid FROM pg_catalog.pg_class c
			JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
			WHERE ns.nspname = $1 AND c.relname = $2`, n.Schema, n.Name).Scan(&oid)
	}
	if err == nil {
		return oid, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("load table %s: %w", n, err)
	}
	h := "check --tables: name a table as SQL does, schema.table, e.g. public.orders, with double quotes around a part that is not all lower case: public.\"Orders\"; list tables with \\dt *.* in psql"
	if near := nearMisses(ctx, conn, n); len(near) > 0 {
		h = fmt.Sprintf("unquoted names fold to lower case; did you mean %s? (in a shell: --tables '%s')", strings.Join(near, " or "), near[0])
	}
	return 0, hint.Wrap(fmt.Errorf("load table %s: %w: no table %s in database %q", n, ErrTableNotFound, n, conn.Config().Database), h)
}

// nearMisses lists the tables whose names differ from n in case only.
func nearMisses(ctx context.Context, conn *pgx.Conn, n TableName) []string {
	rows, err := conn.Query(ctx, `SELECT ns.nspname, c.relname FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND lower(c.relname) = lower($2)
		AND ($1 = '' AND pg_catalog.pg_table_is_visible(c.oid) OR lower(ns.nspname) = lower($1))
		ORDER BY 1, 2 LIMIT 5`, n.Schema, n.Name)
	if err != nil {
		return nil
	}
	var out []string
	for rows.Next() {
		var m TableName
		if rows.Scan(&m.Schema, &m.Name) == nil {
			out = append(out, m.String())
		}
	}
	rows.Close()
	return out
}

// LoadTableByOID reads the table with pg_class.oid oid.
func LoadTableByOID(ctx context.Context, conn *pgx.Conn, oid uint32) (*Table, error) {
	t, err := LoadTablesByOID(ctx, conn, []uint32{oid})
	if err != nil {
		return nil, err
	}
	return t[0], nil
}

// TypeResolver fills in the type details of columns known only by type OID
// and modifier (as in a pgoutput Relation message), caching by OID.
type TypeResolver struct {
	conn  *pgx.Conn
	cache map[uint32]typeRow
}

type typeRow struct {
	typtype, category byte
	elem, base        uint32
	typtypmod         int32
}

// NewTypeResolver returns a resolver that queries pg_type on conn.
func NewTypeResolver(conn *pgx.Conn) *TypeResolver {
	return &TypeResolver{conn: conn, cache: map[uint32]typeRow{}}
}

func (r *TypeResolver) row(ctx context.Context, oid uint32) (typeRow, error) {
	if tr, ok := r.cache[oid]; ok {
		return tr, nil
	}
	var typtype, category string
	var tr typeRow
	err := r.conn.QueryRow(ctx, `SELECT typtype::text, typcategory::text, typelem, typbasetype, typtypmod
		FROM pg_catalog.pg_type WHERE oid = $1`, oid).Scan(&typtype, &category, &tr.elem, &tr.base, &tr.typtypmod)
	if err != nil {
		return tr, fmt.Errorf("look up type oid %d: %w", oid, err)
	}
	tr.typtype, tr.category = typtype[0], category[0]
	r.cache[oid] = tr
	return tr, nil
}

// domainBase follows a chain of domains to its base type.
func (r *TypeResolver) domainBase(ctx context.Context, oid uint32, tr typeRow) (uint32, int32, typeRow, error) {
	mod := int32(-1)
	for i := 0; tr.typtype == 'd'; i++ {
		if i > 100 {
			return 0, 0, tr, fmt.Errorf("look up type oid %d: domain chain too long", oid)
		}
		if mod < 0 {
			mod = tr.typtypmod
		}
		oid = tr.base
		var err error
		if tr, err = r.row(ctx, oid); err != nil {
			return 0, 0, tr, err
		}
	}
	return oid, mod, tr, nil
}

// resolve fills ElemOID, IsEnum, BaseOID and BaseTypeMod of each column
// from its TypeOID, looking up the types not cached one by one.
func (r *TypeResolver) resolve(ctx context.Context, cols []Column) error {
	for i := range cols {
		c := &cols[i]
		tr, err := r.row(ctx, c.TypeOID)
		if err != nil {
			return fmt.Errorf("look up type of column %s: %w", c.Name, err)
		}
		c.ElemOID, c.IsEnum, c.BaseOID, c.BaseTypeMod = 0, false, 0, -1
		base := c.TypeOID
		if tr.typtype == 'd' {
			if base, c.BaseTypeMod, tr, err = r.domainBase(ctx, base, tr); err != nil {
				return fmt.Errorf("look up type of column %s: %w", c.Name, err)
			}
			c.BaseOID = base
		}
		if tr.category == 'A' && tr.elem != 0 && base != OIDInt2Vector && base != OIDOidVector {
			el, err := r.row(ctx, tr.elem)
			if err != nil {
				return fmt.Errorf("look up type of column %s: %w", c.Name, err)
			}
			elem := tr.elem
			if el.typtype == 'd' {
				if elem, _, el, err = r.domainBase(ctx, elem, el); err != nil {
					return fmt.Errorf("look up type of column %s: %w", c.Name, err)
				}
			}
			c.ElemOID, c.IsEnum = elem, el.typtype == 'e'
		} else {
			c.IsEnum = tr.typtype == 'e'
		}
	}
	return nil
}
