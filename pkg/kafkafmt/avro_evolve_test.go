package kafkafmt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

const (
	orderV1 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}`
	// v2 adds a field with a default (BACKWARD compatible).
	orderV2 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"},{"name":"note","type":"string","default":"none"}]}`
	// v3 changes qty's type: no reader of v1/v2 resolves it.
	orderV3   = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"string"}]}`
	keySchema = `{"type":"record","name":"Key","fields":[{"name":"id","type":"long"}]}`
	// keyV2 adds a field with a default: the same key under both.
	keyV2 = `{"type":"record","name":"Key","fields":[{"name":"id","type":"long"},{"name":"region","type":"string","default":"eu"}]}`
)

func avroDec(t *testing.T, env string, key, value Format, policy string, onErr func(*DecodeError, string)) Decoder {
	t.Helper()
	if key == nil {
		key = bytesFormat{}
	}
	d, err := NewDecoder(Config{Envelope: env, Key: key, Value: value, Collection: "t", Source: "kafka.t", OnDecodeError: policy, DecodeErrors: onErr})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestAvroTwoVersions: records written with v1 and v2 of a subject read
// with the latest (v2) at start: v1 records get v2's default.
func TestAvroTwoVersions(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	s1, s2 := reg.Serde(t, "t-value", orderV1), reg.Serde(t, "t-value", orderV2)
	d := avroDec(t, "none", nil, newAvroTest(t, reg, "t-value", 0), "", nil)
	for i, b := range [][]byte{
		s1.Encode(t, map[string]any{"id": int64(1), "qty": 5}),
		s2.Encode(t, map[string]any{"id": int64(2), "qty": 6, "note": "rush"}),
		s1.Encode(t, map[string]any{"id": int64(3), "qty": 7}),
	} {
		if err := d.Add(rec(0, int64(i), []byte("k"), b)); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	r := d.Flush()
	defer r.Release()
	got := rows(t, r)
	want := []string{
		`0 0 k {"id":1,"note":"none","qty":5}`,
		`0 1 k {"id":2,"note":"rush","qty":6}`,
		`0 2 k {"id":3,"note":"none","qty":7}`,
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("row %d = %s, want prefix %s", i, got[i], w)
		}
	}

	// A v3 that drops note again: v2 records read with v3 (the latest)
	// lose it, as resolution says; an older version is no error.
	noteless := reg.Serde(t, "t-value", strings.Replace(orderV1, `"name":"qty","type":"int"}`, `"name":"qty","type":"int"},{"name":"memo","type":"string","default":""}`, 1))
	l := avroDec(t, "none", nil, newAvroTest(t, reg, "t-value", 0), "", nil)
	for i, b := range [][]byte{
		s2.Encode(t, map[string]any{"id": int64(2), "qty": 6, "note": "rush"}),
		noteless.Encode(t, map[string]any{"id": int64(3), "qty": 7, "memo": "m"}),
	} {
		if err := l.Add(rec(0, int64(i), []byte("k"), b)); err != nil {
			t.Fatalf("older version read with the latest: %v", err)
		}
	}
	lr := l.Flush()
	defer lr.Release()
	if g := rows(t, lr); !strings.HasPrefix(g[0], `0 0 k {"id":2,"memo":"","qty":6}`) || !strings.HasPrefix(g[1], `0 1 k {"id":3,"memo":"m","qty":7}`) {
		t.Fatalf("read with v3: %v", g)
	}

	// Pinned to v1: v2 records are read as v1 (note dropped).
	p := avroDec(t, "none", nil, newAvroTest(t, reg, "t-value", 1), "", nil)
	if err := p.Add(rec(0, 0, []byte("k"), s2.Encode(t, map[string]any{"id": int64(2), "qty": 6, "note": "rush"}))); err != nil {
		t.Fatal(err)
	}
	pr := p.Flush()
	defer pr.Release()
	if g := rows(t, pr); !strings.HasPrefix(g[0], `0 0 k {"id":2,"qty":6}`) {
		t.Fatalf("pinned v1 read %s", g[0])
	}
}

// TestAvroNewVersionWhileRunning: the reader is v1 (the latest at start);
// v2 is registered later and a record written with it is a definite
// error naming the fix; an incompatible v3 is a definite error too.
func TestAvroNewVersionWhileRunning(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	s1 := reg.Serde(t, "t-value", orderV1)
	d := avroDec(t, "none", nil, newAvroTest(t, reg, "t-value", 0), "", nil)
	if err := d.Add(rec(0, 0, []byte("k"), s1.Encode(t, map[string]any{"id": int64(1), "qty": 5}))); err != nil {
		t.Fatal(err)
	}
	s2 := reg.Serde(t, "t-value", orderV2)
	err := d.Add(rec(0, 1, []byte("k"), s2.Encode(t, map[string]any{"id": int64(2), "qty": 6, "note": "x"})))
	var de *DecodeError
	if !errors.As(err, &de) || de.Offset != 1 || !strings.Contains(de.Msg, "version 2") || !strings.Contains(de.Msg, "note") || !strings.Contains(de.Msg, "--value-schema-version 1") {
		t.Fatalf("v2 record: %v, want a decode error at offset 1 naming version 2, the field and --value-schema-version 1", err)
	}
	cl, _ := sr.NewClient(sr.URLs(reg.URL))
	cl.SetCompatibility(t.Context(), sr.SetCompatibility{Level: sr.CompatNone}, "t-value")
	s3 := reg.Serde(t, "t-value", orderV3)
	err = d.Add(rec(0, 2, []byte("k"), s3.Encode(t, map[string]any{"id": int64(3), "qty": "many"})))
	if !errors.As(err, &de) || de.Offset != 2 || !strings.Contains(de.Msg, "cannot be read with the reader schema") {
		t.Fatalf("v3 record: %v, want a decode error at offset 2: cannot be read", err)
	}
	r := d.Flush()
	defer r.Release()
	if r.NumRows() != 1 {
		t.Fatalf("%d rows, want only the v1 record", r.NumRows())
	}
}

// TestAvroUpsertKeyVersions: a key written with two versions of the key
// subject is one key (keys are normalized to the reader schema), and the
// state rebuilt from the decoder's own output equals the live state.
func TestAvroUpsertKeyVersions(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	ks1, ks2, vs := reg.Serde(t, "t-key", keySchema), reg.Serde(t, "t-key", keyV2), reg.Serde(t, "t-value", orderV1)
	kf, vf := newAvroTest(t, reg, "t-key", 0), newAvroTest(t, reg, "t-value", 0)
	d := avroDec(t, "upsert", kf, vf, "", nil)
	key1 := ks1.Encode(t, map[string]any{"id": int64(1)})
	key1b := ks2.Encode(t, map[string]any{"id": int64(1), "region": "eu"})
	for i, r := range []struct{ k, v []byte }{
		{key1, vs.Encode(t, map[string]any{"id": int64(1), "qty": 1})},
		{key1b, vs.Encode(t, map[string]any{"id": int64(1), "qty": 2})},
	} {
		if err := d.Add(rec(0, int64(i), r.k, r.v)); err != nil {
			t.Fatal(err)
		}
	}
	out := d.Flush()
	defer out.Release()
	got := rows(t, out)
	want := []string{
		`{"id":1,"region":"eu"} {"id":1,"qty":1} @0:0 +1`,
		`{"id":1,"region":"eu"} {"id":1,"qty":1} @0:1 -1`,
		`{"id":1,"region":"eu"} {"id":1,"qty":2} @0:1 +1`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The state rebuilt from those rows (Raw re-encodes) is the live one:
	// a tombstone of the v1-encoded key retracts the row.
	checkRebuiltTombstone(t, kf, vf, out, key1, `{"id":1,"region":"eu"} {"id":1,"qty":2} @0:2 -1`)
}

// TestAvroDecodeErrorPolicies: bad magic byte, truncated framing, an
// unknown schema id and a truncated payload under fail, skip and inline.
func TestAvroDecodeErrorPolicies(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	good := reg.Serde(t, "t-value", orderV1).Encode(t, map[string]any{"id": int64(1), "qty": 5})
	bad := []struct {
		name, msg string
		b         []byte
	}{
		{"bad magic", "bad magic byte 0x7b", []byte(`{"id":1}`)},
		{"short framing", "truncated: 3 bytes", []byte{0, 0, 0}},
		{"unknown id", "unknown schema id 99", []byte{0, 0, 0, 0, 99, 2, 10}},
		{"truncated payload", "schema id 1: avro", good[:6]},
	}
	for _, policy := range Policies {
		t.Run(policy, func(t *testing.T) {
			var counted []string
			d := avroDec(t, "none", nil, newAvroTest(t, reg, "t-value", 0), policy, func(de *DecodeError, p string) {
				if p != policy {
					t.Errorf("counted with policy %s, want %s", p, policy)
				}
				counted = append(counted, de.Msg)
			})
			off := int64(0)
			for _, b := range bad {
				err := d.Add(rec(0, off, []byte("k"), b.b))
				var de *DecodeError
				switch {
				case policy == PolicyFail && (!errors.As(err, &de) || de.Offset != off || !strings.Contains(de.Msg, b.msg)):
					t.Errorf("%s: %v, want a decode error at %d with %q", b.name, err, off, b.msg)
				case policy != PolicyFail && err != nil:
					t.Errorf("%s: %v, want none under %s", b.name, err, policy)
				}
				off++
			}
			if err := d.Add(rec(0, off, []byte("k"), good)); err != nil {
				t.Fatal(err)
			}
			r := d.Flush()
			defer r.Release()
			got := rows(t, r)
			var want []string
			switch policy {
			case PolicyFail, PolicySkip:
				want = []string{`0 4 k {"id":1,"qty":5}`}
			case PolicyInline:
				for i := range bad {
					want = append(want, fmt.Sprintf(`0 %d k {"decode_error":"`, i))

				}
				want = append(want, `0 4 k {"decode_error":null,"decoded":{"id":1,"qty":5},"raw":null}`)
			}
			if len(got) != len(want) {
				t.Fatalf("rows\n%s\nwant %d", strings.Join(got, "\n"), len(want))
			}
			for i := range want {
				if !strings.HasPrefix(got[i], want[i]) {
					t.Errorf("row %d = %s, want prefix %s", i, got[i], want[i])
				}
				if policy == PolicyInline && i < len(bad) && !strings.Contains(got[i], bad[i].msg) {
					t.Errorf("row %d = %s, want the error %q", i, got[i], bad[i].msg)
				}
			}
			if policy == PolicyInline {
				// Raw of an inline error row is the record's bytes.
				f := r.Schema().FieldIndices("value")[0]
				raw, err := d.(*policyDecoder).cfg.Value.Raw(r.Column(f), 3)
				if err != nil || string(raw) != string(good[:6]) {
					t.Fatalf("raw of an error row = %x, %v, want %x", raw, err, good[:6])
				}
			}
			if len(counted) != len(bad) {
				t.Fatalf("counted %d decode errors, want %d: %v", len(counted), len(bad), counted)
			}
		})
	}
}

// FuzzAvroDecode: no input crashes the decoder; whatever Check accepts
// appends.
func FuzzAvroDecode(f *testing.F) {
	reg := testenv.StartRegistry(f, testenv.RegistryOptions{})
	id := reg.Register(f, "all-value", allTypes)
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, byte(id)})
	f.Add([]byte{0, 0, 0, 0, byte(id), 1, 2, 3, 255, 255, 255, 255, 15})
	f.Add(append([]byte{0, 0, 0, 0, byte(id)}, make([]byte, 200)...))
	f.Add([]byte{0, 0, 0, 0, 99})
	fm := newAvroTest(f, reg, "all-value", 0)
	f.Fuzz(func(t *testing.T, b []byte) {
		col := fm.NewColumn()
		if fm.Check(b) == nil {
			col.Append(b)
		}
		col.Finish().Release()
	})
}

// TestAvroSwitchPastReaders: an evolving reader switches to a later
// version only if it reads the records of every reader so far, those of
// this run and (Past) of the collection's earlier generations, so that a
// run after a restart decides as the first did: v3 reads v2's records but
// not v1's (v2's note has a default, v3's has none).
func TestAvroSwitchPastReaders(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	_, s2 := reg.Serde(t, "t-value", orderV1), reg.Serde(t, "t-value", orderV2)
	s3 := reg.Serde(t, "t-value", `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"},`+
		`{"name":"note","type":"string"},{"name":"memo","type":"string","default":""}]}`)
	r, err := NewRegistry(RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	v3 := s3.Encode(t, map[string]any{"id": int64(1), "qty": 1, "note": "n", "memo": "m"})
	for _, c := range []struct {
		name string
		cfg  AvroConfig
	}{
		{"this run", AvroConfig{Start: 1}},
		{"after a restart", AvroConfig{Start: 2, Past: []int{1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Registry, cfg.Subject, cfg.Evolve = r, "t-value", true
			f, err := NewAvro(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Start == 1 {
				if _, ok := errors.AsType[*SwitchError](f.Check(s2.Encode(t, map[string]any{"id": int64(1), "qty": 1, "note": "x"}))); !ok {
					t.Fatal("v2 is no switch from v1")
				}
				if err := f.(switcher).switchReader(); err != nil {
					t.Fatal(err)
				}
			}
			err = f.Check(v3)
			if _, ok := errors.AsType[*SwitchError](err); ok || err == nil || !strings.Contains(err.Error(), "cannot read records of version 1") {
				t.Fatalf("v3: %v, want a refusal naming version 1", err)
			}
		})
	}
}
