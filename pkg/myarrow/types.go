// Package myarrow maps MySQL and MariaDB tables and values to Arrow: the
// column types (docs/types-mysql.md), the values of the text protocol (what
// a snapshot's SELECT returns) and the values of binlog row events (what
// go-mysql's replication package decodes), so that one row read either way
// gives identical Arrow values.
package myarrow

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// MetaType is the Arrow field metadata key holding a column's MySQL type
// (information_schema.COLUMNS.COLUMN_TYPE, e.g. "int(10) unsigned").
const MetaType = "mysql.type"

// Kind is how a column's values are converted.
type Kind int

// The kinds of columns.
const (
	KindInt Kind = iota + 1
	KindUint
	KindDecimal
	KindDecimalText // DECIMAL with more than 38 digits: utf8 text
	KindFloat32
	KindFloat64
	KindString
	KindBinary
	KindDate
	KindDatetime
	KindTimestamp
	KindTime
	KindYear
	KindEnum
	KindSet
	KindBit
	KindJSON
)

// Column is one column of a table.
type Column struct {
	Name string
	// DataType and ColumnType are information_schema's DATA_TYPE ("int")
	// and COLUMN_TYPE ("int(10) unsigned").
	DataType, ColumnType string
	Nullable             bool
	Kind                 Kind
	// Bits is the integer width (8, 16, 24, 32, 64) of integer kinds.
	Bits int
	// Precision and Scale of DECIMAL.
	Precision, Scale int
	// Length is the fixed byte length of BINARY(n) (values are padded
	// with zero bytes to it), 0 otherwise.
	Length int
	// Values are the names of an ENUM or SET, in definition order.
	Values []string
	// Charset decodes the binlog bytes of a text column (CHAR, VARCHAR,
	// TEXT): information_schema's CHARACTER_SET_NAME. Nil for the others.
	Charset *Charset
	// Type is the Arrow type.
	Type arrow.DataType
	// HasDefault says whether the column has a default: NULL
	// (DefaultNull), an expression (DefaultExpr, its text in Default)
	// or the literal Default, unquoted (DefaultValue converts it).
	HasDefault, DefaultNull, DefaultExpr bool
	Default                              string
}

// Table is a MySQL table as rtrctl sees it.
type Table struct {
	Schema, Name string
	Columns      []Column
	// PrimaryKey lists the primary key's columns (indexes into Columns).
	PrimaryKey []int
	// Engine (InnoDB, ...) and Rows, information_schema's estimate.
	Engine string
	Rows   int64
}

// QualifiedName is the table's collection name, CollectionName(Schema,
// Name): shop.orders, shop.`a.b`.
func (t *Table) QualifiedName() string { return CollectionName(t.Schema, t.Name) }

// SQL is `db`.`table`, quoted.
func (t *Table) SQL() string { return QuoteIdent(t.Schema) + "." + QuoteIdent(t.Name) }

// QuoteIdent quotes an identifier with backticks.
func QuoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// Fields returns the Arrow fields of the user columns, each with the MySQL
// type in its metadata.
func (t *Table) Fields() []arrow.Field {
	fs := make([]arrow.Field, len(t.Columns))
	for i, c := range t.Columns {
		fs[i] = arrow.Field{Name: c.Name, Type: c.Type, Nullable: c.Nullable,
			Metadata: arrow.NewMetadata([]string{MetaType}, []string{c.ColumnType})}
	}
	return fs
}

// SelectList is the column list a snapshot selects, with the casts that
// make the text protocol give exact values: FLOAT as DOUBLE (MySQL prints
// a FLOAT with 6 digits, which loses bits), BIT as a number (the text
// protocol sends BIT as raw bytes), ENUM and SET as their index and bit
// mask (what the binlog carries), named from Column.Values by Convert.
func (t *Table) SelectList() string {
	parts := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		q := QuoteIdent(c.Name)
		switch c.Kind {
		case KindFloat32:
			parts[i] = "CAST(" + q + " AS DOUBLE)"
		case KindBit, KindEnum, KindSet:
			// ENUM and SET as their number, the binlog's form, so that
			// both paths name it from Values.
			parts[i] = "(" + q + " + 0)"
		default:
			parts[i] = q
		}
	}
	return strings.Join(parts, ", ")
}

// ErrNoTable is wrapped when a table does not exist.
var ErrNoTable = fmt.Errorf("no such table")

// whereTable selects the rows of one table in information_schema: the
// plain equalities let the server look the table up directly, the binary
// ones make the match exact where a case-insensitive collation of
// information_schema would also match RelMix for relmix.
const whereTable = `TABLE_SCHEMA = ? AND TABLE_NAME = ?
	AND CAST(TABLE_SCHEMA AS BINARY) = CAST(? AS BINARY) AND CAST(TABLE_NAME AS BINARY) = CAST(? AS BINARY)`

// LoadTable describes the table named exactly db.table (no case folding)
// from information_schema.
func LoadTable(ctx context.Context, conn *client.Conn, db, table string) (*Table, error) {
	name := CollectionName(db, table)
	r, err := conn.Execute(`SELECT TABLE_TYPE, IFNULL(ENGINE, ''), IFNULL(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE `+whereTable, db, table, db, table)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", name, err)
	}
	if r.RowNumber() == 0 {
		h := "name the table as db.table exactly as SHOW TABLES prints it, e.g. shop.orders, with backticks around a part with dots, spaces or other characters: shop.`order lines`"
		if near := nearMisses(conn, db, table); len(near) > 0 {
			h = fmt.Sprintf("names are compared exactly; did you mean %s?", strings.Join(near, " or "))
		}
		return nil, hint.Wrap(fmt.Errorf("describe %s: %w", name, ErrNoTable), h)
	}
	t := &Table{Schema: db, Name: table}
	typ, _ := r.GetString(0, 0)
	if typ != "BASE TABLE" && typ != "SYSTEM VERSIONED" {
		return nil, fmt.Errorf("describe %s: it is a %s, not a table", name, strings.ToLower(typ))
	}
	t.Engine, _ = r.GetString(0, 1)
	t.Rows, _ = r.GetInt(0, 2)
	r, err = conn.Execute(`SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE,
		IFNULL(NUMERIC_PRECISION, 0), IFNULL(NUMERIC_SCALE, 0), IFNULL(CHARACTER_SET_NAME, ''),
		IFNULL(CHARACTER_OCTET_LENGTH, 0), IFNULL(EXTRA, ''), COLUMN_DEFAULT IS NULL, IFNULL(COLUMN_DEFAULT, '')
		FROM information_schema.COLUMNS WHERE `+whereTable+` ORDER BY ORDINAL_POSITION`, db, table, db, table)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", name, err)
	}
	for i := range r.RowNumber() {
		var c Column
		c.Name, _ = r.GetString(i, 0)
		c.DataType, _ = r.GetString(i, 1)
		c.ColumnType, _ = r.GetString(i, 2)
		nullable, _ := r.GetString(i, 3)
		c.Nullable = nullable == "YES"
		prec, _ := r.GetInt(i, 4)
		scale, _ := r.GetInt(i, 5)
		cs, _ := r.GetString(i, 6)
		octets, _ := r.GetInt(i, 7)
		extra, _ := r.GetString(i, 8)
		if strings.Contains(strings.ToUpper(extra), "VIRTUAL") {
			return nil, fmt.Errorf("describe %s: column %s is a virtual generated column, which rtrctl does not support", name, c.Name)
		}
		if err := c.resolve(int(prec), int(scale), cs, int(octets)); err != nil {
			return nil, fmt.Errorf("describe %s: %w", name, err)
		}
		noDefault, _ := r.GetInt(i, 9)
		def, _ := r.GetString(i, 10)
		c.readDefault(def, noDefault == 1, extra)
		t.Columns = append(t.Columns, c)
	}
	served := map[string]*Charset{}
	for i := range t.Columns {
		c := &t.Columns[i]
		if err := t.realLabels(ctx, conn, c); err != nil {
			return nil, fmt.Errorf("describe %s: %w", name, err)
		}
		if c.Charset != nil && (c.Charset.SingleByte() || c.Charset.Probed()) {
			if served[c.Charset.Name] == nil {
				cs, err := serverBytes(ctx, conn, c.Charset)
				if err != nil {
					return nil, fmt.Errorf("describe %s: column %s: %w", name, c.Name, err)
				}
				served[c.Charset.Name] = cs
			}
			c.Charset = served[c.Charset.Name]
		}
	}
	r, err = conn.Execute(`SELECT COLUMN_NAME FROM information_schema.STATISTICS
		WHERE `+whereTable+` AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX`, db, table, db, table)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", name, err)
	}
	for i := range r.RowNumber() {
		name, _ := r.GetString(i, 0)
		for j, c := range t.Columns {
			if c.Name == name {
				t.PrimaryKey = append(t.PrimaryKey, j)
			}
		}
	}
	return t, nil
}

// nearMisses lists the tables whose names differ from db.table in case
// only.
func nearMisses(conn *client.Conn, db, table string) []string {
	r, err := conn.Execute(`SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES
		WHERE LOWER(TABLE_SCHEMA) = LOWER(?) AND LOWER(TABLE_NAME) = LOWER(?) ORDER BY 1, 2 LIMIT 5`, db, table)
	if err != nil {
		return nil
	}
	var out []string
	for i := range r.RowNumber() {
		d, _ := r.GetString(i, 0)
		t, _ := r.GetString(i, 1)
		out = append(out, CollectionName(d, t))
	}
	return out
}

// resolve sets Kind, Bits, Type etc. from the information_schema fields.
func (c *Column) resolve(prec, scale int, charset string, octets int) error {
	ct := strings.ToLower(c.ColumnType)
	unsigned := strings.Contains(ct, "unsigned")
	integer := func(bits int) {
		c.Bits = bits
		if unsigned {
			c.Kind = KindUint
			switch bits {
			case 8:
				c.Type = arrow.PrimitiveTypes.Uint8
			case 16:
				c.Type = arrow.PrimitiveTypes.Uint16
			case 24, 32:
				c.Type = arrow.PrimitiveTypes.Uint32
			default:
				c.Type = arrow.PrimitiveTypes.Uint64
			}
			return
		}
		c.Kind = KindInt
		switch bits {
		case 8:
			c.Type = arrow.PrimitiveTypes.Int8
		case 16:
			c.Type = arrow.PrimitiveTypes.Int16
		case 24, 32:
			c.Type = arrow.PrimitiveTypes.Int32
		default:
			c.Type = arrow.PrimitiveTypes.Int64
		}
	}
	switch strings.ToLower(c.DataType) {
	case "tinyint":
		integer(8)
	case "smallint":
		integer(16)
	case "mediumint":
		integer(24)
	case "int", "integer":
		integer(32)
	case "bigint":
		integer(64)
	case "decimal", "numeric":
		c.Precision, c.Scale = prec, scale
		if prec > 38 {
			c.Kind, c.Type = KindDecimalText, arrow.BinaryTypes.String
		} else {
			c.Kind, c.Type = KindDecimal, &arrow.Decimal128Type{Precision: int32(prec), Scale: int32(scale)}
		}
	case "float":
		c.Kind, c.Type = KindFloat32, arrow.PrimitiveTypes.Float32
	case "double", "real", "double precision":
		c.Kind, c.Type = KindFloat64, arrow.PrimitiveTypes.Float64
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
		if charset == "binary" {
			c.Kind, c.Type = KindBinary, arrow.BinaryTypes.Binary
			break
		}
		c.Kind, c.Type = KindString, arrow.BinaryTypes.String
		if charset == "" {
			charset = "utf8mb4"
		}
		cs, err := LookupCharset(charset)
		if err != nil {
			return charsetError(c.Name, charset, c.ColumnType)
		}
		c.Charset = cs
	case "json":
		c.Kind, c.Type = KindJSON, arrow.BinaryTypes.String
	case "binary":
		c.Kind, c.Type, c.Length = KindBinary, arrow.BinaryTypes.Binary, octets
	case "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		c.Kind, c.Type = KindBinary, arrow.BinaryTypes.Binary
	case "date":
		c.Kind, c.Type = KindDate, arrow.FixedWidthTypes.Date32
	case "datetime":
		c.Kind, c.Type = KindDatetime, &arrow.TimestampType{Unit: arrow.Microsecond}
	case "timestamp":
		c.Kind, c.Type = KindTimestamp, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	case "time":
		c.Kind, c.Type = KindTime, arrow.FixedWidthTypes.Duration_us
	case "year":
		c.Kind, c.Type = KindYear, arrow.PrimitiveTypes.Uint16
	case "enum":
		vs, err := parseValueList(c.ColumnType)
		if err != nil {
			return fmt.Errorf("column %s: %w", c.Name, err)
		}
		c.Kind, c.Type, c.Values = KindEnum, arrow.BinaryTypes.String, vs
	case "set":
		vs, err := parseValueList(c.ColumnType)
		if err != nil {
			return fmt.Errorf("column %s: %w", c.Name, err)
		}
		c.Kind, c.Type, c.Values = KindSet, arrow.BinaryTypes.String, vs
	case "bit":
		c.Kind, c.Type, c.Bits = KindBit, arrow.PrimitiveTypes.Uint64, prec
	default:
		return fmt.Errorf("column %s has type %s, which rtrctl does not support (docs/types-mysql.md lists the supported types)", c.Name, c.ColumnType)
	}
	return nil
}

// parseValueList reads the quoted names of enum('a','b') or set('x','y').
func parseValueList(ct string) ([]string, error) {
	open := strings.IndexByte(ct, '(')
	if open < 0 || !strings.HasSuffix(ct, ")") {
		return nil, fmt.Errorf("cannot read the values of %q", ct)
	}
	s := ct[open+1 : len(ct)-1]
	var out []string
	for len(s) > 0 {
		if s[0] != '\'' {
			return nil, fmt.Errorf("cannot read the values of %q", ct)
		}
		var b strings.Builder
		i := 1
		for ; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			b.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, fmt.Errorf("cannot read the values of %q", ct)
		}
		out = append(out, b.String())
		s = s[i+1:]
		if strings.HasPrefix(s, ",") {
			s = s[1:]
		}
	}
	return out, nil
}

// BinlogTypes returns the TABLE_MAP column type codes a column of this
// kind may have in a binlog (the real type of MYSQL_TYPE_STRING columns is
// checked separately by BinlogRealType).
func (c Column) BinlogTypes() []byte {
	switch c.Kind {
	case KindInt, KindUint:
		switch c.Bits {
		case 8:
			return []byte{mysql.MYSQL_TYPE_TINY}
		case 16:
			return []byte{mysql.MYSQL_TYPE_SHORT}
		case 24:
			return []byte{mysql.MYSQL_TYPE_INT24}
		case 32:
			return []byte{mysql.MYSQL_TYPE_LONG}
		}
		return []byte{mysql.MYSQL_TYPE_LONGLONG}
	case KindDecimal, KindDecimalText:
		return []byte{mysql.MYSQL_TYPE_NEWDECIMAL}
	case KindFloat32:
		return []byte{mysql.MYSQL_TYPE_FLOAT}
	case KindFloat64:
		return []byte{mysql.MYSQL_TYPE_DOUBLE}
	case KindBit:
		return []byte{mysql.MYSQL_TYPE_BIT}
	case KindDate:
		return []byte{mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE}
	case KindDatetime:
		return []byte{mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_DATETIME2}
	case KindTimestamp:
		return []byte{mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIMESTAMP2}
	case KindTime:
		return []byte{mysql.MYSQL_TYPE_TIME, mysql.MYSQL_TYPE_TIME2}
	case KindYear:
		return []byte{mysql.MYSQL_TYPE_YEAR}
	case KindEnum, KindSet:
		return []byte{mysql.MYSQL_TYPE_STRING}
	case KindJSON:
		return []byte{mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_BLOB}
	}
	// strings and binaries
	switch strings.ToLower(c.DataType) {
	case "char", "binary":
		return []byte{mysql.MYSQL_TYPE_STRING}
	case "varchar", "varbinary":
		return []byte{mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING}
	}
	return []byte{mysql.MYSQL_TYPE_BLOB}
}

// CheckBinlogColumns compares a TABLE_MAP's column types (and names, when
// the binlog carries them: binlog_row_metadata=FULL) with t. It returns ""
// when they agree, else what differs.
func (t *Table) CheckBinlogColumns(types []byte, meta []uint16, names []string) string {
	if len(types) != len(t.Columns) {
		return fmt.Sprintf("the binlog has %d columns, the table had %d when first read", len(types), len(t.Columns))
	}
	for i, c := range t.Columns {
		if len(names) == len(types) && names[i] != c.Name {
			return fmt.Sprintf("column %d is %s in the binlog, %s when first read", i+1, names[i], c.Name)
		}
		tp := types[i]
		ok := false
		for _, want := range c.BinlogTypes() {
			if tp == want {
				ok = true
			}
		}
		if !ok {
			return fmt.Sprintf("column %s (%s) has binlog type %d, which does not match", c.Name, c.ColumnType, tp)
		}
		if tp == mysql.MYSQL_TYPE_STRING && i < len(meta) && meta[i] >= 256 {
			real := byte(meta[i] >> 8)
			want := byte(mysql.MYSQL_TYPE_STRING)
			switch c.Kind {
			case KindEnum:
				want = mysql.MYSQL_TYPE_ENUM
			case KindSet:
				want = mysql.MYSQL_TYPE_SET
			}
			if real&0x30 != 0x30 {
				real |= 0x30 // long CHAR: the length's high bits live here
			}
			if real != want {
				return fmt.Sprintf("column %s (%s) has binlog type %d, which does not match", c.Name, c.ColumnType, real)
			}
		}
		if tp == mysql.MYSQL_TYPE_NEWDECIMAL && i < len(meta) {
			if p, s := int(meta[i]>>8), int(meta[i]&0xff); p != c.Precision || s != c.Scale {
				return fmt.Sprintf("column %s is decimal(%d,%d) in the binlog, %s when first read", c.Name, p, s, c.ColumnType)
			}
		}
	}
	return ""
}

// realLabels reads the ENUM or SET labels of c from the table definition
// itself when information_schema cannot show them: it holds them in
// utf8mb3, where a character outside the Basic Multilingual Plane (an
// emoji) is '?'. MariaDB evaluates every label in a variable of the
// column's type (DECLARE ... TYPE OF), which gives the real characters.
// MySQL has no such statement: there the labels stay as
// information_schema shows them, on the snapshot and the binlog path
// alike (both name a value by its number).
func (t *Table) realLabels(ctx context.Context, conn *client.Conn, c *Column) error {
	if c.Kind != KindEnum && c.Kind != KindSet || !slices.ContainsFunc(c.Values, func(v string) bool { return strings.Contains(v, "?") }) {
		return nil
	}
	if ok, err := upstream.IsMariaDB(ctx, conn); err != nil || !ok {
		return err
	}
	value := "i + 1"
	if c.Kind == KindSet {
		value = "1 << i"
	}
	block := fmt.Sprintf("BEGIN NOT ATOMIC DECLARE v TYPE OF %s.%s; DECLARE s LONGTEXT CHARACTER SET utf8mb4 DEFAULT '[]'; DECLARE i INT DEFAULT 0; "+
		"WHILE i < %d DO SET v = %s; SET s = JSON_ARRAY_APPEND(s, '$', CONVERT(v USING utf8mb4)); SET i = i + 1; END WHILE; SET @rtr_labels = s; END",
		t.SQL(), QuoteIdent(c.Name), len(c.Values), value)
	if _, err := upstream.Execute(ctx, conn, block); err != nil {
		return fmt.Errorf("read the labels of %s: %w", c.Name, err)
	}
	r, err := upstream.Execute(ctx, conn, "SELECT @rtr_labels")
	if err != nil {
		return fmt.Errorf("read the labels of %s: %w", c.Name, err)
	}
	s, _ := r.GetString(0, 0)
	var vs []string
	if err := json.Unmarshal([]byte(s), &vs); err != nil || len(vs) != len(c.Values) {
		return fmt.Errorf("read the labels of %s: got %q for %d labels", c.Name, s, len(c.Values))
	}
	c.Values = vs
	return nil
}

// serverBytes asks the server how it converts each byte of the
// single-byte character set cs (or each two-byte code of a double-byte
// one) to utf8mb4 and returns cs following it.
func serverBytes(ctx context.Context, conn *client.Conn, cs *Charset) (*Charset, error) {
	if cs.Probed() {
		r, err := upstream.Execute(ctx, conn, fmt.Sprintf("SELECT HEX(CONVERT(CAST(X'%x' AS CHAR CHARACTER SET %s) USING utf8mb4))", ProbeCodes(), cs.Name))
		if err != nil {
			return nil, fmt.Errorf("read the code mapping of character set %s: %w", cs.Name, err)
		}
		h, _ := r.GetString(0, 0)
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("read the code mapping of character set %s: %w", cs.Name, err)
		}
		out, _ := cs.WithServerCodes(strings.Split(string(b), "\n"))
		return out, nil
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	r, err := upstream.Execute(ctx, conn, fmt.Sprintf("SELECT HEX(CONVERT(_%s X'%x' USING utf8mb4))", cs.Name, all))
	if err != nil {
		return nil, fmt.Errorf("read the byte mapping of character set %s: %w", cs.Name, err)
	}
	h, _ := r.GetString(0, 0)
	b, err := hex.DecodeString(h)
	rs := []rune(string(b))
	if err != nil || len(rs) != 256 {
		return nil, fmt.Errorf("read the byte mapping of character set %s: %d characters for 256 bytes", cs.Name, len(rs))
	}
	out, _ := cs.WithServerBytes([256]rune(rs))
	return out, nil
}
