// Package render prints Arrow records for people and scripts: an aligned
// table, CSV with a header row, or JSON Lines. It is presentation only:
// values print in PostgreSQL's output forms (values.go).
package render

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
)

// Formats lists the text formats.
var Formats = []string{"table", "csv", "json"}

// Rows writes rec in format (table, csv or json). repeat, when not nil,
// gives how many times to print each row (a multiplicity); rows with a
// repeat of 0 are skipped.
func Rows(w io.Writer, format string, rec arrow.Record, repeat func(row int) int64) error {
	switch format {
	case "table":
		return table(w, rec, repeat)
	case "csv":
		return csvRows(w, rec, repeat)
	case "json":
		return jsonRows(w, rec, repeat)
	}
	return fmt.Errorf("render: unknown format %q (want table, csv or json)", format)
}

func times(repeat func(int) int64, i int) int64 {
	if repeat == nil {
		return 1
	}
	return repeat(i)
}

// Value prints one value as text; nulls are "".
func Value(col arrow.Array, i int) string {
	if col.IsNull(i) {
		return ""
	}
	switch c := col.(type) {
	case *array.String:
		return c.Value(i)
	case *array.LargeString:
		return c.Value(i)
	case *array.Binary:
		return fmt.Sprintf("\\x%x", c.Value(i))
	case *array.LargeBinary:
		return fmt.Sprintf("\\x%x", c.Value(i))
	case *array.FixedSizeBinary:
		return fmt.Sprintf("\\x%x", c.Value(i))
	case *array.Timestamp:
		return timestamp(int64(c.Value(i)), c.DataType().(*arrow.TimestampType))
	case *array.Date32:
		return string(appendDate32(nil, int32(c.Value(i))))
	case *array.Time64:
		return clock(uint64(c.Value(i)), c.DataType().(*arrow.Time64Type).Unit)
	case *array.Time32:
		return clock(uint64(c.Value(i)), c.DataType().(*arrow.Time32Type).Unit)
	case *array.Float32:
		return formatFloat(float64(c.Value(i)), 32)
	case *array.Float64:
		return formatFloat(c.Value(i), 64)
	case *array.Decimal128:
		return c.Value(i).ToString(c.DataType().(*arrow.Decimal128Type).Scale)
	case *array.Decimal256:
		return c.Value(i).ToString(c.DataType().(*arrow.Decimal256Type).Scale)
	case *array.MonthDayNanoInterval:
		v := c.Value(i)
		return interval(v.Months, v.Days, v.Nanoseconds)
	case *array.List:
		return arrayLiteral(c, i)
	case *array.LargeList:
		return arrayLiteral(c, i)
	}
	return col.ValueStr(i)
}

func table(w io.Writer, rec arrow.Record, repeat func(int) int64) error {
	n := int(rec.NumCols())
	rows := [][]string{}
	header := make([]string, n)
	for j := 0; j < n; j++ {
		header[j] = rec.ColumnName(j)
	}
	rows = append(rows, header)
	for i := 0; i < int(rec.NumRows()); i++ {
		row := make([]string, n)
		for j := 0; j < n; j++ {
			if rec.Column(j).IsNull(i) {
				row[j] = "NULL"
			} else {
				row[j] = tableCell(Value(rec.Column(j), i))
			}
		}
		for k := int64(0); k < times(repeat, i); k++ {
			rows = append(rows, row)
		}
	}
	width := make([]int, n)
	for _, r := range rows {
		for j, v := range r {
			width[j] = max(width[j], utf8.RuneCountInString(v))
		}
	}
	bw := bufio.NewWriter(w)
	for _, r := range rows {
		for j, v := range r {
			if j > 0 {
				bw.WriteString("  ")
			}
			bw.WriteString(v)
			if j < n-1 {
				bw.WriteString(strings.Repeat(" ", width[j]-utf8.RuneCountInString(v)))
			}
		}
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

func csvRows(w io.Writer, rec arrow.Record, repeat func(int) int64) error {
	cw := &csvWriter{bw: bufio.NewWriter(w)}
	n := int(rec.NumCols())
	header := make([]string, n)
	for j := 0; j < n; j++ {
		header[j] = rec.ColumnName(j)
	}
	if err := cw.header(header); err != nil {
		return err
	}
	if err := cw.rows(rec, repeat); err != nil {
		return err
	}
	return cw.bw.Flush()
}

func jsonRows(w io.Writer, rec arrow.Record, repeat func(int) int64) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	n := int(rec.NumCols())
	for i := 0; i < int(rec.NumRows()); i++ {
		obj := make(orderedRow, n)
		for j := 0; j < n; j++ {
			obj[j] = kv{rec.ColumnName(j), jsonValue(rec.Column(j), i)}
		}
		for k := int64(0); k < times(repeat, i); k++ {
			if err := enc.Encode(obj); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

type kv struct {
	k string
	v any
}

// orderedRow marshals as a JSON object with keys in column order.
type orderedRow []kv

func (r orderedRow) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range r {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.k)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(e.v)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}
