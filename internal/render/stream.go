package render

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"
)

// tableWindow is how many rows the table format buffers to size its
// columns; later rows widen columns for the rows after them only.
const tableWindow = 4096

// Stream writes records of one schema in a text format as they come, in
// bounded memory: CSV writes its header once, JSON Lines has none, and
// the table format buffers up to tableWindow rows at a time to size its
// columns (a result that fits in one window prints as Rows prints it).
// Values print as Value prints them.
type Stream struct {
	format string
	names  []string
	bw     *bufio.Writer
	cw     *csvWriter
	rows   [][]string // table: the buffered window, header first
	width  []int
}

// NewStream begins a stream of records with the given columns in format
// (table, csv or json).
func NewStream(w io.Writer, format string, fields []arrow.Field) (*Stream, error) {
	s := &Stream{format: format, bw: bufio.NewWriterSize(w, 1<<16)}
	for _, f := range fields {
		s.names = append(s.names, f.Name)
	}
	switch format {
	case "csv":
		s.cw = &csvWriter{bw: s.bw}
		if err := s.cw.header(s.names); err != nil {
			return nil, err
		}
	case "table":
		s.width = make([]int, len(fields))
		s.rows = [][]string{s.names}
	case "json":
	default:
		return nil, fmt.Errorf("render: unknown format %q (want table, csv or json)", format)
	}
	return s, nil
}

// Write writes rec's rows, each repeat(i) times (once when repeat is nil).
func (s *Stream) Write(rec arrow.Record, repeat func(row int) int64) error {
	switch s.format {
	case "json":
		return jsonRows(s.bw, rec, repeat)
	case "csv":
		return s.cw.rows(rec, repeat)
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		row := make([]string, len(s.names))
		for j := range row {
			if rec.Column(j).IsNull(i) {
				row[j] = "NULL"
			} else {
				row[j] = strings.ReplaceAll(Value(rec.Column(j), i), "\n", `\n`)
			}
		}
		for k := int64(0); k < times(repeat, i); k++ {
			s.rows = append(s.rows, row)
			if len(s.rows) >= tableWindow {
				if err := s.flushTable(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// flushTable prints the buffered table rows.
func (s *Stream) flushTable() error {
	for _, r := range s.rows {
		for j, v := range r {
			s.width[j] = max(s.width[j], utf8.RuneCountInString(v))
		}
	}
	n := len(s.names)
	for _, r := range s.rows {
		for j, v := range r {
			if j > 0 {
				s.bw.WriteString("  ")
			}
			s.bw.WriteString(v)
			if j < n-1 {
				s.bw.WriteString(strings.Repeat(" ", s.width[j]-utf8.RuneCountInString(v)))
			}
		}
		s.bw.WriteByte('\n')
	}
	s.rows = s.rows[:0]
	return nil
}

// Close writes what is buffered.
func (s *Stream) Close() error {
	switch s.format {
	case "table":
		if err := s.flushTable(); err != nil {
			return err
		}
	}
	return s.bw.Flush()
}
