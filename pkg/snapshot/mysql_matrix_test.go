package snapshot

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/internal/mymatrix"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// mxCase and mxType are the matrix's (internal/mymatrix).
type (
	mxCase = mymatrix.Case
	mxType = mymatrix.Type
)

// mxRows is a sink that consolidates rows like myRows and keeps, per id,
// the Arrow value of column v rendered as mxRender renders the server's.
type mxRows struct {
	*myRows
	vals map[string]string
	neg  []string // rows seen with a negative multiplicity after a record
}

func newMxRows() *mxRows { return &mxRows{myRows: newMyRows(), vals: map[string]string{}} }

func (s *mxRows) Data(coll string, rec arrow.Record) error {
	if err := s.add(coll, rec); err != nil {
		return err
	}
	cols, _, diffs, _ := pipe.SplitData(rec)
	for i := 0; i < int(rec.NumRows()); i++ {
		if diffs.Value(i) > 0 {
			s.vals[cols[0].ValueStr(i)] = mxText(cols[1], i)
		}
	}
	for r, n := range s.rows[coll] {
		if n < 0 {
			s.neg = append(s.neg, fmt.Sprintf("%s has multiplicity %d", r, n))
		}
	}
	return nil
}
func (s *mxRows) Progress(string, frontier.Frontier) error { return nil }
func (s *mxRows) Error(coll string, at frontier.Time, m string) error {
	s.errs = append(s.errs, coll+": "+m)
	return nil
}

// mxRender is the SQL that prints column v the way mxText prints its
// Arrow value: text as it is (a utf8mb4 connection; mxServerText hexes
// it), binary as hex, numbers and times in full, zero dates as NULL
// (their Arrow value).
func mxRender(a arrow.DataType) string {
	switch a.ID() {
	case arrow.STRING:
		return "v"
	case arrow.BINARY:
		return "HEX(v)"
	case arrow.UINT16, arrow.UINT64: // YEAR, BIT, unsigned
		return "CAST(v + 0 AS CHAR)"
	case arrow.FLOAT32, arrow.FLOAT64:
		return "CAST(CAST(v AS DOUBLE) AS CHAR)"
	case arrow.DATE32:
		return "IF(MONTH(v) = 0 OR DAYOFMONTH(v) = 0, NULL, DATE_FORMAT(v, '%Y-%m-%d'))"
	case arrow.TIMESTAMP:
		return "IF(MONTH(v) = 0 OR DAYOFMONTH(v) = 0, NULL, DATE_FORMAT(v, '%Y-%m-%d %H:%i:%s.%f'))"
	case arrow.DURATION:
		return "TIME_FORMAT(v, '%H:%i:%s.%f')"
	}
	return "CAST(v AS CHAR)"
}

// mxText prints value i of a the way mxRender prints the server's.
func mxText(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "NULL"
	}
	switch x := a.(type) {
	case *array.String:
		return strings.ToUpper(hex.EncodeToString([]byte(x.Value(i))))
	case *array.Binary:
		return strings.ToUpper(hex.EncodeToString(x.Value(i)))
	case *array.Float32:
		return mxFloat(float64(x.Value(i)))
	case *array.Float64:
		return mxFloat(x.Value(i))
	case *array.Decimal128:
		return x.Value(i).ToString(x.DataType().(*arrow.Decimal128Type).Scale)
	case *array.Date32:
		return x.Value(i).ToTime().Format("2006-01-02")
	case *array.Timestamp:
		return time.UnixMicro(int64(x.Value(i))).UTC().Format("2006-01-02 15:04:05.000000")
	case *array.Duration:
		us := int64(x.Value(i))
		sign := ""
		if us < 0 {
			sign, us = "-", -us
		}
		return fmt.Sprintf("%s%02d:%02d:%02d.%06d", sign, us/3600e6, us/60e6%60, us/1e6%60, us%1e6)
	}
	return a.ValueStr(i)
}

// mxFloat prints a float as a canonical bit pattern, so that the server's
// decimal text and the Arrow value compare exactly (-0 included).
func mxFloat(f float64) string { return strconv.FormatUint(math.Float64bits(f), 16) }

// mxServerText canonicalizes the server's rendering of a float column.
func mxServerText(t arrow.DataType, s string) string {
	if t.ID() == arrow.STRING && s != "NULL" {
		return strings.ToUpper(hex.EncodeToString([]byte(s)))
	}
	if t.ID() != arrow.FLOAT32 && t.ID() != arrow.FLOAT64 || s == "NULL" {
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return "bad float " + s
	}
	if t.ID() == arrow.FLOAT32 {
		f = float64(float32(f))
	}
	return mxFloat(f)
}

// runMatrix checks every case of every type against a real server: the
// snapshot value equals the server's own rendering and the binlog's
// insert; then an update of another column and a delete, streamed after
// the snapshot, cancel the snapshot's rows exactly (never a negative
// multiplicity, only the new row after the update, nothing after the
// delete).
func runMatrix(t *testing.T, types []mxType) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	conn := myConnect(t, m)
	u := upstream.MustParseMySQL(m.URL())
	ctx := context.Background()
	for ti, ty := range types {
		t.Run(ty.Name, func(t *testing.T) {
			tb := fmt.Sprintf("t%d", ti)
			coll := db + "." + tb
			myExec(t, conn, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v %s, n int NOT NULL DEFAULT 0)", coll, ty.DDL))
			startPos, _ := myPosition(t, m)
			myExec(t, conn, "SET NAMES utf8mb4", "SET time_zone = '+00:00'")
			if ty.SQLMode != "" {
				myExec(t, conn, "SET sql_mode = '"+ty.SQLMode+"'")
			}
			for i, c := range ty.Cases {
				myExec(t, conn, fmt.Sprintf("INSERT INTO %s (id, v) VALUES (%d, %s)", coll, i+1, c.Expr))
			}
			myExec(t, conn, "SET sql_mode = DEFAULT")
			midPos, mid := myPosition(t, m)
			snap := newMxRows()
			res, err := MySQL(ctx, MySQLConfig{Upstream: u, Tables: []string{coll}}, snap)
			if err != nil {
				t.Fatal(err)
			}
			arrowType := res.Schemas[coll].Columns[1].Type
			r, err := conn.Execute(fmt.Sprintf("SELECT id, IFNULL(%s, 'NULL') FROM %s", mxRender(arrowType), coll))
			if err != nil {
				t.Fatal(err)
			}
			server := map[string]string{}
			for i := range r.RowNumber() {
				id, _ := r.GetString(i, 0)
				v, _ := r.GetString(i, 1)
				server[id] = mxServerText(arrowType, v)
			}
			snapVals := snap.vals
			snap.vals = map[string]string{}
			myExec(t, conn, fmt.Sprintf("UPDATE %s SET n = 1", coll))
			_, upd := myPosition(t, m)
			updPos, _ := myPosition(t, m)
			myExec(t, conn, "DELETE FROM "+coll)
			_, end := myPosition(t, m)

			ins := newMxRows()
			if err := replicate.StreamMySQL(ctx, replicate.MySQLConfig{Upstream: u, Tables: []string{coll}, Start: startPos, StopAt: mid}, ins); err != nil {
				t.Fatal(err)
			}
			// The update, then the delete, onto the snapshot's rows.
			if err := replicate.StreamMySQL(ctx, replicate.MySQLConfig{Upstream: u, Tables: []string{coll}, Start: midPos, StopAt: upd}, snap); err != nil {
				t.Fatal(err)
			}
			afterUpdate := map[string]int64{}
			for k, n := range snap.rows[coll] {
				afterUpdate[k] = n
			}
			if err := replicate.StreamMySQL(ctx, replicate.MySQLConfig{Upstream: u, Tables: []string{coll}, Start: updPos, StopAt: end}, snap); err != nil {
				t.Fatal(err)
			}
			if len(ins.errs)+len(snap.errs) > 0 {
				t.Fatalf("stream errors: %v %v", ins.errs, snap.errs)
			}
			for i, c := range ty.Cases {
				t.Run(c.Name, func(t *testing.T) {
					id := strconv.Itoa(i + 1)
					if got, want := snapVals[id], server[id]; got != want {
						t.Errorf("snapshot %s, server %s", got, want)
					}
					if got, want := ins.vals[id], server[id]; got != want {
						t.Errorf("binlog insert %s, server %s", got, want)
					}
					n := 0
					for k, m := range afterUpdate {
						if strings.HasPrefix(k, id+"|") {
							if m != 1 || !strings.HasSuffix(k, "|1") {
								t.Errorf("after the update: %.200q has multiplicity %d", k, m)
							}
							n++
						}
					}
					if n != 1 {
						t.Errorf("after the update: %d rows of id %s, want the new one", n, id)
					}
				})
			}
			if len(snap.neg) > 0 {
				t.Errorf("negative multiplicities: %v", snap.neg)
			}
			if len(snap.rows[coll]) != 0 {
				t.Errorf("after the delete: %s", myDiffRows(nil, snap.rows[coll]))
			}
		})
	}
}

// charsetText is text every listed character set holds, per set.
var charsetText = map[string]string{
	"latin1": "café € ‰ ÿ Œ", "latin2": "Łódź žluťoučký", "latin5": "İstanbul ğüşöç", "latin7": "Ąžuolas ėū",
	"greek": "Ελληνικά", "hebrew": "עברית", "cp1250": "Łódź €", "cp1251": "Привет, мир €", "cp1256": "مرحبا",
	"cp1257": "Ąžuolas €", "cp850": "café ÿ", "cp852": "Łódź", "cp866": "Привет", "koi8r": "Привет мир",
	"koi8u": "Привіт ґ", "macroman": "café π", "tis620": "ภาษาไทย", "ascii": "plain ascii ~",
	"ucs2": "héllo Ωмир 中文", "utf16": "héllo 😀 Ωмир 中文", "utf16le": "héllo 😀 中文", "utf32": "héllo 😀 中文 𝄞",
	"gbk": "中文简体 繁體", "gb2312": "中文简体", "big5": "繁體中文", "euckr": "한국어 텍스트", "sjis": "日本語カナ ｶﾅ",
	"cp932": "日本語カナ ｶﾅ ①", "ujis": "日本語かな", "eucjpms": "日本語かな ①", "utf8mb3": "héllo 中文", "utf8mb4": "héllo 😀",
}

var singleByte = []string{"latin1", "latin2", "latin5", "latin7", "greek", "hebrew", "cp1250", "cp1251", "cp1256",
	"cp1257", "cp850", "cp852", "cp866", "koi8r", "koi8u", "macroman", "tis620"}

func charsetTypes() []mxType {
	var out []mxType
	var names []string
	names = append(names, singleByte...)
	names = append(names, "ascii", "ucs2", "utf16", "utf16le", "utf32", "gbk", "gb2312", "big5", "euckr", "sjis", "cp932", "ujis", "eucjpms", "utf8mb3", "utf8mb4")
	for _, cs := range names {
		sample := "'" + strings.ReplaceAll(charsetText[cs], "'", "''") + "'"
		cases := []mxCase{{Name: "sample", Expr: sample}, {Name: "empty", Expr: "''"}, {Name: "trailing_spaces", Expr: "CONCAT(" + sample + ", '  ')"}, {Name: "null", Expr: "NULL"}}
		var all []byte
		for b := 0; b < 256; b++ {
			all = append(all, byte(b))
		}
		switch {
		case cs == "ascii":
			cases = append(cases, mxCase{Name: "bytes_00_7f", Expr: fmt.Sprintf("_ascii X'%x'", all[:128])})
		case strings.Contains(strings.Join(singleByte, " "), cs):
			cases = append(cases, mxCase{Name: "bytes_00_ff", Expr: fmt.Sprintf("_%s X'%x'", cs, all)})
		case cs == "sjis" || cs == "cp932":
			// The code points where Shift_JIS and Windows-31J differ: ＼ ～ ∥ －.
			cases = append(cases, mxCase{Name: "wave_dash_etc", Expr: fmt.Sprintf("_%s X'815F81608161817C'", cs)})
		case cs == "ujis" || cs == "eucjpms":
			cases = append(cases, mxCase{Name: "wave_dash_etc", Expr: fmt.Sprintf("_%s X'A1C0A1C1A1C2A1DD'", cs)})
		}
		out = append(out,
			mxType{Name: "varchar_" + cs, DDL: "varchar(300) CHARACTER SET " + cs, Cases: cases},
			mxType{Name: "char_" + cs, DDL: "char(40) CHARACTER SET " + cs, Cases: cases[:3]},
			mxType{Name: "text_" + cs, DDL: "text CHARACTER SET " + cs, Cases: cases[:2]})
	}
	return out
}

// TestMySQLCharsetsAgree: text of every decoded character set reads the
// same from the snapshot (converted by the server) as from the binlog
// (decoded by myarrow.Charset), and updates and deletes of snapshot rows
// cancel them exactly.
func TestMySQLCharsetsAgree(t *testing.T) { runMatrix(t, charsetTypes()) }

// TestMySQLTypeMatrix: every type at its boundaries, the snapshot and
// the binlog against the server's own rendering, updates and deletes
// cancelling snapshot rows exactly.
func TestMySQLTypeMatrix(t *testing.T) { runMatrix(t, mymatrix.Types) }
