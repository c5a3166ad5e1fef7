package pipe

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// DataSchema returns the schema of a data stream: the user fields, then
// _time (uint64), _diff (int64) and, for partitioned domains, _partition
// (utf8), all non-nullable. md becomes the schema metadata; pass
// Header.Metadata() (Writer.WriteRecord sets it from the header anyway).
func DataSchema(userFields []arrow.Field, d frontier.Domain, md arrow.Metadata) *arrow.Schema {
	fields := make([]arrow.Field, 0, len(userFields)+3)
	fields = append(fields, userFields...)
	fields = append(fields,
		arrow.Field{Name: ColTime, Type: arrow.PrimitiveTypes.Uint64},
		arrow.Field{Name: ColDiff, Type: arrow.PrimitiveTypes.Int64},
	)
	if d.Partitioned() {
		fields = append(fields, arrow.Field{Name: ColPartition, Type: arrow.BinaryTypes.String})
	}
	return arrow.NewSchema(fields, &md)
}

// SplitData splits a record of a data stream (as the Reader returns it, or
// as DataSchema describes it) into its user columns and its reserved
// columns. parts is nil for unpartitioned domains. The arrays are owned by
// rec. For a record that is not shaped like a data record, SplitData
// returns all nils.
func SplitData(rec arrow.Record) (cols []arrow.Array, times *array.Uint64, diffs *array.Int64, parts *array.String) {
	if rec == nil {
		return nil, nil, nil, nil
	}
	s := rec.Schema()
	ti := -1
	for i := 0; i < s.NumFields(); i++ {
		if s.Field(i).Name == ColTime {
			ti = i
			break
		}
	}
	n := int(rec.NumCols())
	if ti < 0 || ti+1 >= n || s.Field(ti+1).Name != ColDiff {
		return nil, nil, nil, nil
	}
	var ok bool
	if times, ok = rec.Column(ti).(*array.Uint64); !ok {
		return nil, nil, nil, nil
	}
	if diffs, ok = rec.Column(ti + 1).(*array.Int64); !ok {
		return nil, nil, nil, nil
	}
	if ti+2 < n {
		if s.Field(ti+2).Name != ColPartition {
			return nil, nil, nil, nil
		}
		if parts, ok = rec.Column(ti + 2).(*array.String); !ok {
			return nil, nil, nil, nil
		}
	}
	return rec.Columns()[:ti], times, diffs, parts
}

// reservedLayout returns the reserved columns a stream of header h must end
// with, in order.
func reservedLayout(h Header) []arrow.Field {
	u64 := arrow.PrimitiveTypes.Uint64
	str := arrow.BinaryTypes.String
	switch h.Kind {
	case KindData:
		fs := []arrow.Field{{Name: ColTime, Type: u64}, {Name: ColDiff, Type: arrow.PrimitiveTypes.Int64}}
		if h.Domain.Partitioned() {
			fs = append(fs, arrow.Field{Name: ColPartition, Type: str})
		}
		return fs
	case KindProgress:
		return []arrow.Field{{Name: ColPartition, Type: str}, {Name: ColUpper, Type: u64}}
	case KindBindings:
		return []arrow.Field{{Name: ColTime, Type: u64}, {Name: ColPartition, Type: str}, {Name: ColUpper, Type: u64}}
	case KindError:
		return []arrow.Field{{Name: ColTime, Type: u64}, {Name: ColMessage, Type: str}}
	case KindReset:
		return []arrow.Field{{Name: ColTime, Type: u64}}
	}
	return nil
}

// checkSchema checks the columns of a stream against its header. It returns
// the offending column name and a message, or "" and nil.
func checkSchema(h Header, s *arrow.Schema) (string, error) {
	want := reservedLayout(h)
	fields := s.Fields()
	if h.Kind == KindData {
		hasPart := s.HasField(ColPartition)
		switch {
		case hasPart && !h.Domain.Partitioned():
			return ColPartition, fmt.Errorf("domain %s is not partitioned, so a data stream has no %s column", h.Domain, ColPartition)
		case !hasPart && h.Domain.Partitioned():
			return ColPartition, fmt.Errorf("column is missing: domain %s is partitioned, so a data stream must end with %s", h.Domain, layoutNames(want))
		}
	}
	nUser := len(fields) - len(want)
	if h.Kind != KindData && nUser != 0 {
		names := make([]string, len(want))
		for i, f := range want {
			names[i] = f.Name
		}
		return "", fmt.Errorf("a %s stream has exactly the columns %s, got %d columns", h.Kind, strings.Join(names, ", "), len(fields))
	}
	for _, w := range want {
		if !s.HasField(w.Name) {
			return w.Name, fmt.Errorf("column is missing: a %s stream of domain %s ends with %s", h.Kind, h.Domain, layoutNames(want))
		}
	}
	seen := map[string]bool{}
	for i := 0; i < nUser; i++ {
		f := fields[i]
		if f.Name == "" {
			return "", fmt.Errorf("column %d has an empty name", i)
		}
		if strings.HasPrefix(f.Name, "_") {
			for _, w := range want {
				if w.Name == f.Name {
					return f.Name, fmt.Errorf("reserved column is out of place: user columns come first, then %s", layoutNames(want))
				}
			}
			return f.Name, fmt.Errorf("user column names must not start with '_' (reserved): rename the column")
		}
		if seen[f.Name] {
			return f.Name, fmt.Errorf("column name appears twice")
		}
		seen[f.Name] = true
		if err := checkType(f.Type, 0); err != nil {
			return f.Name, err
		}
	}
	if nUser < 0 {
		nUser = 0
	}
	for j, w := range want {
		i := nUser + j
		if i >= len(fields) {
			return w.Name, fmt.Errorf("column is missing: a %s stream of domain %s ends with %s", h.Kind, h.Domain, layoutNames(want))
		}
		f := fields[i]
		if f.Name != w.Name {
			return w.Name, fmt.Errorf("column is missing or out of place: found %q where %s belongs (a %s stream of domain %s ends with %s)", f.Name, w.Name, h.Kind, h.Domain, layoutNames(want))
		}
		if !arrow.TypeEqual(f.Type, w.Type) {
			return w.Name, fmt.Errorf("column has type %s, want %s", f.Type, w.Type)
		}
	}
	for _, k := range h.Key {
		if !seen[k] {
			return "", fmt.Errorf("%s names column %q, which is not a user column of the stream", KeyKey, k)
		}
	}
	return "", nil
}

func layoutNames(fs []arrow.Field) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// maxNesting bounds how deeply nested a user column's type may be.
const maxNesting = 32

// checkType reports whether t is allowed in a user column. Version 1 allows
// the Arrow types every implementation reads alike, and refuses dictionary
// encoding, unions, run-end encoding, view types and extension types.
func checkType(t arrow.DataType, depth int) error {
	if depth > maxNesting {
		return fmt.Errorf("type is nested more than %d levels deep", maxNesting)
	}
	switch t := t.(type) {
	case *arrow.NullType, *arrow.BooleanType,
		*arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type,
		*arrow.Uint8Type, *arrow.Uint16Type, *arrow.Uint32Type, *arrow.Uint64Type,
		*arrow.Float16Type, *arrow.Float32Type, *arrow.Float64Type,
		*arrow.Decimal128Type, *arrow.Decimal256Type,
		*arrow.Date32Type, *arrow.Date64Type, *arrow.Time32Type, *arrow.Time64Type,
		*arrow.TimestampType, *arrow.DurationType,
		*arrow.MonthIntervalType, *arrow.DayTimeIntervalType, *arrow.MonthDayNanoIntervalType,
		*arrow.StringType, *arrow.BinaryType, *arrow.LargeStringType, *arrow.LargeBinaryType,
		*arrow.FixedSizeBinaryType:
		return nil
	case *arrow.ListType:
		return checkType(t.Elem(), depth+1)
	case *arrow.LargeListType:
		return checkType(t.Elem(), depth+1)
	case *arrow.FixedSizeListType:
		return checkType(t.Elem(), depth+1)
	case *arrow.MapType:
		return checkType(t.Elem(), depth+1)
	case *arrow.StructType:
		for _, f := range t.Fields() {
			if err := checkType(f.Type, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("type %s is not allowed in pipe version %s (dictionary, union, run-end encoded, view and extension types are not): cast the column to a plain type", t, Version)
}

// EncodeSchema serializes a schema (fields, types, nullability and
// metadata, exactly) as base64 (standard, padded) of an Arrow IPC stream
// holding only the schema message: the form of rtr.schema and of the
// store's manifests.
func EncodeSchema(s *arrow.Schema) (string, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(s))
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("encode schema: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// DecodeSchema reverses EncodeSchema.
func DecodeSchema(s string) (*arrow.Schema, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decode schema: %w", err)
	}
	r, err := ipc.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("decode schema: %w", err)
	}
	defer r.Release()
	return r.Schema(), nil
}
