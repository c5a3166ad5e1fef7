package snapshot

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// TestBinaryMatchesText copies tables of every type with a binary decoder,
// edge values included, in binary and in text: the Arrow values must be
// the same (the rewind's pgoutput changes go through the text parser, and
// must cancel copied rows exactly).
func TestBinaryMatchesText(t *testing.T) {
	dsn, conn := testDB(t, 1)
	mustExec(t, conn, `CREATE DOMAIN posint AS int CHECK (VALUE > 0);
		CREATE TABLE types (
			b bool, i2 int2, i4 int4, i8 int8, o oid, f4 float4, f8 float8,
			t text, vc varchar(10), bp char(5), nm name, js json, by bytea,
			d date, tm time, ts timestamp, tstz timestamptz, dom posint);
		ALTER TABLE types REPLICA IDENTITY FULL;
		INSERT INTO types VALUES
			(true, 1, 2, 3, 4, 1.5, 0.1, 'plain', 'vc', 'ab', 'nm', '{"a": [1, 2]}', '\x00ff10', '2024-02-29', '12:34:56.789012',
			 '2024-01-01 00:00:00.000001', '2024-06-30 23:59:59.999999+02', 7),
			(false, -32768, -2147483648, -9223372036854775808, 0, 'NaN', 'NaN', '', '', '', '', 'null', '', 'infinity', '00:00',
			 'infinity', 'infinity', 1),
			(NULL, 32767, 2147483647, 9223372036854775807, 4294967295, 'Infinity', '-Infinity', e'tab\there\nnew\\back ü',
			 'ünïcödé', 'x', 'name with space', '"x"', '\x', '-infinity', '24:00:00', '-infinity', '-infinity', 2147483647),
			(true, 0, 0, 0, 1, '-0', '-0', 'x', 'y', 'z', 'n', '[]', '\x5c0a09', '0044-03-15 BC', '23:59:59.999999',
			 '1999-12-31 23:59:59.5 BC', '1970-01-01 00:00:00+00', 3),
			(NULL, NULL, NULL, NULL, NULL, NULL, 1e-300, NULL, NULL, NULL, NULL, NULL, NULL, '1970-01-01', NULL,
			 '2000-01-01 00:00:00', '2000-01-01 00:00:00+00', NULL),
			(NULL, NULL, NULL, NULL, NULL, '1e-45', '5e-324', NULL, NULL, NULL, NULL, NULL, NULL, '5874897-12-31', '00:00:00.000001',
			 '294247-01-10 04:00:54.775806', '4714-11-24 00:00:00+00 BC', NULL);
		CREATE TABLE texty (n numeric(10, 2), u uuid, a int[], i interval);
		ALTER TABLE texty REPLICA IDENTITY FULL;
		INSERT INTO texty VALUES (1.25, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,NULL,3}', '1 day 02:00:00'), (NULL, NULL, NULL, NULL);
		CREATE PUBLICATION pubtypes FOR TABLE types, texty`)
	slot := uniqueSlot(t, conn)
	auto, sa := takeSnapshot(t, Config{Upstream: upstream.MustParsePostgres(dsn), Publication: "pubtypes", Slot: slot})
	text, st := takeSnapshot(t, Config{Upstream: upstream.MustParsePostgres(dsn), Publication: "pubtypes", Slot: slot, Format: "text"})
	formats := map[string]string{}
	for _, tr := range auto.Tables {
		formats[tr.Name] = tr.Format
	}
	if formats["public.types"] != "binary" || formats["public.texty"] != "text" {
		t.Errorf("auto formats %v, want binary for public.types and text for public.texty", formats)
	}
	for _, tr := range text.Tables {
		if tr.Format != "text" {
			t.Errorf("Format text copied %s in %s", tr.Name, tr.Format)
		}
	}
	for _, coll := range []string{"public.types", "public.texty"} {
		if len(sa.rows[coll]) != map[string]int{"public.types": 6, "public.texty": 2}[coll] {
			t.Errorf("%s: %d rows: %v", coll, len(sa.rows[coll]), sa.rows[coll])
		}
		if d := diffRows(sa.rows[coll], st.rows[coll]); d != "" {
			t.Errorf("%s: binary copy differs from text copy:\n%s", coll, d)
		}
	}
}

func TestBinaryMalformed(t *testing.T) {
	good := append(append([]byte(nil), binarySignature...), 0, 0, 0, 0, 0, 0, 0, 0)
	tests := []struct {
		name string
		data []byte
	}{
		{"no signature", []byte("PGCOPX\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")},
		{"wrong field count", append(append([]byte(nil), good...), 0, 2)},
		{"bad int4 length", append(append([]byte(nil), good...), 0, 1, 0, 0, 0, 3, 1, 2, 3)},
		{"data after trailer", append(append([]byte(nil), good...), 0xff, 0xff, 0, 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dec, _ := binaryDecoder(23)
			b := array.NewInt32Builder(memory.DefaultAllocator)
			defer b.Release()
			tb := &table{name: "t", t: &pgarrow.Table{Columns: []pgarrow.Column{{Name: "c", TypeOID: pgarrow.OIDInt4}}}}
			c := &binCopier{base: &copier{tb: tb, maxRows: 10, maxBytes: 1 << 20}, decs: []binDecoder{dec}, bld: []array.Builder{b}}
			_, err := c.decode(tc.data)
			if !errors.Is(err, errBinary) {
				t.Fatalf("decode = %v, want errBinary", err)
			}
		})
	}
}

// FuzzBinaryDecode feeds arbitrary bytes, in arbitrary chunks, to the
// COPY binary decoder of an (int4, text) table: it must never panic.
func FuzzBinaryDecode(f *testing.F) {
	good := append(append([]byte(nil), binarySignature...), 0, 0, 0, 0, 0, 0, 0, 0,
		0, 2, 0, 0, 0, 4, 0, 0, 0, 7, 0, 0, 0, 2, 'h', 'i', 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0xff, 0xff)
	f.Add(good, uint8(5))
	f.Add(good[:20], uint8(1))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		i4, _ := binaryDecoder(pgarrow.OIDInt4)
		tx, _ := binaryDecoder(pgarrow.OIDText)
		tb := &table{name: "t", t: &pgarrow.Table{Columns: []pgarrow.Column{{Name: "i", TypeOID: pgarrow.OIDInt4}, {Name: "s", TypeOID: pgarrow.OIDText}}}}
		out := make(chan batch, 1000)
		base := &copier{ctx: t.Context(), tb: tb, consts: newConstants(4), out: out, maxRows: 4, maxBytes: 1 << 20}
		c := &binCopier{base: base, decs: []binDecoder{i4, tx},
			bld: []array.Builder{array.NewInt32Builder(memory.DefaultAllocator), array.NewStringBuilder(memory.DefaultAllocator)}}
		defer c.release()
		tb.schema = dataSchema(tb.t)
		n := max(int(chunk), 1)
		for len(data) > 0 {
			k := min(n, len(data))
			if _, err := c.Write(data[:k]); err != nil {
				return
			}
			data = data[k:]
		}
		c.finish()
		close(out)
		for b := range out {
			b.rec.Release()
		}
	})
}

// The binary timestamp decoder refuses the values the text parser
// refuses: the last finite microsecond before int64's end is kept, the
// next one (which would be the infinity sentinel) and later are range
// errors; PostgreSQL's own infinities map to the sentinels.
func TestBinaryTimestampEdges(t *testing.T) {
	dec, _ := binaryDecoder(pgarrow.OIDTimestamp)
	for _, tc := range []struct {
		pg   int64 // microseconds since 2000-01-01
		want int64
		err  bool
	}{
		{math.MaxInt64 - pgEpochMicros - 1, math.MaxInt64 - 1, false},
		{math.MaxInt64 - pgEpochMicros, 0, true},
		{math.MaxInt64 - 1, 0, true},
		{math.MaxInt64, pgarrow.TimestampInfinity, false},
		{math.MinInt64, pgarrow.TimestampNegInfinity, false},
		{-211813488000000000, -211813488000000000 + pgEpochMicros, false}, // 4714-11-24 BC
	} {
		b := array.NewTimestampBuilder(memory.DefaultAllocator, &arrow.TimestampType{Unit: arrow.Microsecond})
		v := binary.BigEndian.AppendUint64(nil, uint64(tc.pg))
		err := dec(b, v)
		if tc.err {
			if !errors.Is(err, pgarrow.ErrTimestampRange) || b.Len() != 0 {
				t.Errorf("decode %d: %v with %d values, want a range error", tc.pg, err, b.Len())
			}
		} else {
			a := b.NewTimestampArray()
			if err != nil || a.Len() != 1 || int64(a.Value(0)) != tc.want {
				t.Errorf("decode %d: %v, %v; want %d", tc.pg, a, err, tc.want)
			}
			a.Release()
		}
		b.Release()
	}
}
