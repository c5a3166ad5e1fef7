package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

// TestSplitBinaryCopies: the outputs of several binary COPYs sent as one
// query are split exactly where each ends: each part is byte for byte the
// output of its COPY alone, however the bytes arrive (as the server's
// messages, or a byte at a time), with empty tables, NULLs, values ending
// in 0xffff (the trailer's bytes) and a header extension.
func TestSplitBinaryCopies(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pg.CreateDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE a (id int, b bytea, t text);
		INSERT INTO a SELECT g, CASE WHEN g % 3 = 0 THEN NULL ELSE decode('00ffff', 'hex') END, repeat('x', g) FROM generate_series(1, 2000) g;
		CREATE TABLE empty (x int);
		CREATE TABLE ff (b bytea); INSERT INTO ff VALUES ('\xffff'), ('\xffffffff'), (NULL);
		CREATE TABLE nocols (); INSERT INTO nocols DEFAULT VALUES; INSERT INTO nocols DEFAULT VALUES`); err != nil {
		t.Fatal(err)
	}
	stmts := []string{"COPY a TO STDOUT (FORMAT binary)", "COPY empty TO STDOUT (FORMAT binary)", "COPY ff TO STDOUT (FORMAT binary)",
		"COPY nocols TO STDOUT (FORMAT binary)", "COPY (SELECT 1 WHERE false) TO STDOUT (FORMAT binary)", "COPY ff TO STDOUT (FORMAT binary)"}
	var want [][]byte
	for _, s := range stmts {
		var b bytes.Buffer
		if _, err := conn.PgConn().CopyTo(ctx, &b, s); err != nil {
			t.Fatal(err)
		}
		want = append(want, b.Bytes())
	}
	split := func(feed func(w io.Writer) error) [][]byte {
		t.Helper()
		got := make([]*bytes.Buffer, len(stmts))
		ended := 0
		sw := &splitWriter{n: len(stmts),
			start: func(i int) io.Writer { got[i] = &bytes.Buffer{}; return got[i] },
			end: func(i int) error {
				if i != ended {
					return fmt.Errorf("output %d ended after %d", i, ended)
				}
				ended++
				return nil
			},
		}
		if err := feed(sw); err != nil {
			t.Fatal(err)
		}
		if ended != len(stmts) {
			t.Fatalf("%d outputs ended, want %d", ended, len(stmts))
		}
		out := make([][]byte, len(got))
		for i, b := range got {
			out[i] = b.Bytes()
		}
		return out
	}
	check := func(how string, got [][]byte) {
		t.Helper()
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%s: output %d (%s): %d bytes, want %d bytes", how, i, stmts[i], len(got[i]), len(want[i]))
			}
		}
	}
	check("one query", split(func(w io.Writer) error {
		_, err := conn.PgConn().CopyTo(ctx, w, strings.Join(stmts, "; "))
		return err
	}))
	all := bytes.Join(want, nil)
	check("a byte at a time", split(func(w io.Writer) error {
		for i := range all {
			if _, err := w.Write(all[i : i+1]); err != nil {
				return err
			}
		}
		return nil
	}))
	check("all at once", split(func(w io.Writer) error {
		_, err := w.Write(all)
		return err
	}))
	// A header extension is passed over; bytes after the last output and
	// a bad signature are errors.
	ext := append(append([]byte(nil), binarySignature...), 0, 0, 0, 0, 0, 0, 0, 3, 'e', 'x', 't', 0xff, 0xff)
	var f binFramer
	if n, end, err := f.feed(ext); n != len(ext) || !end || err != nil {
		t.Errorf("header with an extension: used %d of %d, end %v, %v", n, len(ext), end, err)
	}
	sw := &splitWriter{n: 1, start: func(int) io.Writer { return io.Discard }, end: func(int) error { return nil }}
	if _, err := sw.Write(append(append([]byte(nil), want[1]...), 0)); err == nil {
		t.Error("bytes after the last output: no error")
	}
	var g binFramer
	if _, _, err := g.feed([]byte("PGCOPY\n\xff\r\n\x01 and more")); err == nil {
		t.Error("bad signature: no error")
	}
}
