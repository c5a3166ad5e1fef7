package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// Kept copies. A re-snapshot of a table with a key state is handed over
// as copied, at its snapshot position S, not rewound to the position T
// of the change that asked for it: the first binding past T covers S,
// and the collection at that binding's time is the copy plus the
// changes after S. A copy taken again after a crash that lost the
// collection's data but not that binding would hold a later upstream
// than the binding promised. So before the hand-over the copy is made
// durable as a pending copy of the source (store.PutPending: its rows,
// S, and the table as copied); a restart that re-snapshots the same
// collection at the same T takes it from there, and so hands over
// exactly what the first run did. Copies are removed when a stream
// starts past their T (it never asks for them again).

// Schema metadata of a kept copy.
const (
	metaKeptCollection = "rtr.kept.collection"
	metaKeptAt         = "rtr.kept.at"
	metaKeptSnapshot   = "rtr.kept.snapshot"
	metaKeptTable      = "rtr.kept.table"
	metaKeptFields     = "rtr.kept.fields"
)

// keptName is the pending copy name of collection coll's re-snapshot at
// source position at (its text).
func keptName(coll, at string) string {
	h := sha256.Sum256([]byte(coll + "\x00" + at))
	return hex.EncodeToString(h[:16]) + ".arrow"
}

// keepCopy makes rows (the copy of coll at snapshot position snap, for
// its re-snapshot at at, with user columns fields and the table as
// copied described by table) durable as a pending copy of source.
func keepCopy(st *store.Store, source, coll, at, snap string, table any, fields []arrow.Field, rows []arrow.Record) error {
	desc, err := json.Marshal(table)
	if err != nil {
		return fmt.Errorf("keep the copy of %s at %s: %w", coll, at, err)
	}
	user, err := pipe.EncodeSchema(arrow.NewSchema(fields, nil))
	if err != nil {
		return fmt.Errorf("keep the copy of %s at %s: %w", coll, at, err)
	}
	schema := arrow.NewSchema(fields, nil)
	if len(rows) > 0 {
		schema = rows[0].Schema()
	}
	md := schema.Metadata()
	keys, vals := append(md.Keys(), metaKeptCollection, metaKeptAt, metaKeptSnapshot, metaKeptTable, metaKeptFields), append(md.Values(), coll, at, snap, string(desc), user)
	kept := arrow.NewSchema(schema.Fields(), func() *arrow.Metadata { m := arrow.NewMetadata(keys, vals); return &m }())
	recs := make([]arrow.Record, len(rows))
	for i, r := range rows {
		recs[i] = array.NewRecord(kept, r.Columns(), r.NumRows())
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	if err := st.PutPending(source, keptName(coll, at), kept, recs); err != nil {
		return fmt.Errorf("keep the copy of %s at %s: %w", coll, at, err)
	}
	return nil
}

// A keptCopy is a copy read back.
type keptCopy struct {
	snap   string         // the snapshot position's text
	fields []arrow.Field  // the user columns as copied
	rows   []arrow.Record // in the schema they were kept with
}

// release frees the copy's rows.
func (k *keptCopy) release() {
	for _, r := range k.rows {
		r.Release()
	}
	k.rows = nil
}

// readKept reads source's kept copy of coll for its re-snapshot at at,
// and the table as copied into table; nil when there is none. The
// caller releases it.
func readKept(st *store.Store, source, coll, at string, table any) (*keptCopy, error) {
	schema, recs, ok, err := st.Pending(source, keptName(coll, at))
	if err != nil || !ok {
		return nil, err
	}
	md := schema.Metadata()
	get := func(k string) string {
		if i := md.FindKey(k); i >= 0 {
			return md.Values()[i]
		}
		return ""
	}
	release := func() {
		for _, r := range recs {
			r.Release()
		}
	}
	if get(metaKeptCollection) != coll || get(metaKeptAt) != at {
		release()
		return nil, nil // a hash collision: not this one
	}
	user, err := pipe.DecodeSchema(get(metaKeptFields))
	if err == nil {
		err = json.Unmarshal([]byte(get(metaKeptTable)), table)
	}
	if err != nil {
		release()
		return nil, fmt.Errorf("read the kept copy of %s at %s: %w", coll, at, err)
	}
	var keys, vals []string
	for i, k := range md.Keys() {
		if !strings.HasPrefix(k, "rtr.kept.") {
			keys, vals = append(keys, k), append(vals, md.Values()[i])
		}
	}
	orig := arrow.NewSchema(schema.Fields(), func() *arrow.Metadata { m := arrow.NewMetadata(keys, vals); return &m }())
	k := &keptCopy{snap: get(metaKeptSnapshot), fields: user.Fields(), rows: make([]arrow.Record, len(recs))}
	for i, r := range recs {
		k.rows[i] = array.NewRecord(orig, r.Columns(), r.NumRows())
	}
	release()
	return k, nil
}

// sweepKept removes source's kept copies for re-snapshots at positions
// the stream has passed (passed reports it of a position's text).
func sweepKept(st *store.Store, source string, passed func(at string) bool) error {
	return st.SweepPending(source, func(_ string, md arrow.Metadata) bool {
		i := md.FindKey(metaKeptAt)
		return i >= 0 && !passed(md.Values()[i])
	})
}
