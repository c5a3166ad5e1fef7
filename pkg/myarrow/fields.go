package myarrow

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
)

// TableFromFields describes db.table as it was when a collection's
// columns were fields (Table.Fields of an earlier description, as a
// store keeps them), to decode binlog rows written before an ALTER TABLE
// that the server's catalog is already past. A column of like (the
// catalog's description now) with the same name, type and column type is
// taken as it is; any other is rebuilt from its column type, a text
// column in like's character set for that column name, else utf8mb4 (a
// character set change is not in the fields). It fails for a column type
// it cannot read.
func TableFromFields(db, table string, fields []arrow.Field, like *Table) (*Table, error) {
	t := &Table{Schema: db, Name: table}
	if like != nil {
		t.Engine, t.Rows = like.Engine, like.Rows
	}
	byName := map[string]*Column{}
	if like != nil {
		for i := range like.Columns {
			byName[like.Columns[i].Name] = &like.Columns[i]
		}
	}
	for _, f := range fields {
		ct, ok := f.Metadata.GetValue(MetaType)
		if !ok {
			return nil, fmt.Errorf("describe %s as it was: column %s has no %s", CollectionName(db, table), f.Name, MetaType)
		}
		if c := byName[f.Name]; c != nil && c.ColumnType == ct && arrow.TypeEqual(c.Type, f.Type) && c.Nullable == f.Nullable {
			t.Columns = append(t.Columns, *c)
			continue
		}
		c := Column{Name: f.Name, ColumnType: ct, Nullable: f.Nullable}
		low := strings.ToLower(ct)
		c.DataType = low
		if i := strings.IndexAny(low, "( "); i >= 0 {
			c.DataType = low[:i]
		}
		var nums []int
		if i := strings.IndexByte(low, '('); i >= 0 && c.DataType != "enum" && c.DataType != "set" {
			if j := strings.IndexByte(low[i:], ')'); j > 0 {
				for _, s := range strings.Split(low[i+1:i+j], ",") {
					n, err := strconv.Atoi(strings.TrimSpace(s))
					if err != nil {
						return nil, fmt.Errorf("describe %s as it was: column %s: bad type %s", CollectionName(db, table), f.Name, ct)
					}
					nums = append(nums, n)
				}
			}
		}
		prec, scale, octets := 0, 0, 0
		if len(nums) > 0 {
			prec, octets = nums[0], nums[0]
		}
		if len(nums) > 1 {
			scale = nums[1]
		}
		if c.DataType == "decimal" && len(nums) == 0 {
			prec = 10
		}
		charset := ""
		if f.Type.ID() == arrow.BINARY {
			charset = "binary"
		} else if o := byName[f.Name]; o != nil && o.Charset != nil {
			charset = o.Charset.Name
		}
		if err := c.resolve(prec, scale, charset, octets); err != nil {
			return nil, fmt.Errorf("describe %s as it was: %w", CollectionName(db, table), err)
		}
		if o := byName[f.Name]; o != nil && o.Charset != nil && c.Charset != nil && o.Charset.Name == c.Charset.Name {
			c.Charset = o.Charset // with the server's bytes, if probed
		}
		if !arrow.TypeEqual(c.Type, f.Type) {
			return nil, fmt.Errorf("describe %s as it was: column %s (%s) would be %s, was %s", CollectionName(db, table), f.Name, ct, c.Type, f.Type)
		}
		t.Columns = append(t.Columns, c)
	}
	if like != nil {
		for _, k := range like.PrimaryKey {
			for i, c := range t.Columns {
				if c.Name == like.Columns[k].Name {
					t.PrimaryKey = append(t.PrimaryKey, i)
				}
			}
		}
	}
	return t, nil
}
