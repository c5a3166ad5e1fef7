package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/pkg/frontier"
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
// durable as a pending copy of the source (store.PutPending): a record,
// with no rows, naming the copy's staged files (copystage.go: synced
// already), S, and the table as copied; its files stay when the copy is
// committed. A restart that re-snapshots the same collection at the same
// T takes the copy from those files, and so hands over exactly what the
// first run did. Copies are removed when a stream starts past their T
// (it never asks for them again), and with them every staged copy file
// no remaining kept copy names.

// Schema metadata of a kept copy.
const (
	metaKeptCollection = "rtr.kept.collection"
	metaKeptAt         = "rtr.kept.at"
	metaKeptSnapshot   = "rtr.kept.snapshot"
	metaKeptTable      = "rtr.kept.table"
	metaKeptFields     = "rtr.kept.fields"
	// metaKeptRuns: the copy's staged runs (JSON: [][]store.BatchMeta).
	// A kept copy without it (an older ingest's) holds its rows itself.
	metaKeptRuns = "rtr.kept.runs"
)

// keptName is the pending copy name of collection coll's re-snapshot at
// source position at (its text).
func keptName(coll, at string) string {
	h := sha256.Sum256([]byte(coll + "\x00" + at))
	return hex.EncodeToString(h[:16]) + ".arrow"
}

// keepCopy makes c (the copy of coll at snapshot position snap, for its
// re-snapshot at at, with user columns fields and the table as copied
// described by table) durable as a pending copy of source naming c's
// staged files, which stay from then on (stagedCopy.keep).
func keepCopy(st *store.Store, source, coll, at, snap string, table any, fields []arrow.Field, c *stagedCopy) error {
	if c.kept {
		return nil // read back from its record, which stays
	}
	desc, err := json.Marshal(table)
	if err != nil {
		return fmt.Errorf("keep the copy of %s at %s: %w", coll, at, err)
	}
	user, err := pipe.EncodeSchema(arrow.NewSchema(fields, nil))
	if err != nil {
		return fmt.Errorf("keep the copy of %s at %s: %w", coll, at, err)
	}
	schema, runs := arrow.NewSchema(fields, nil), [][]store.BatchMeta{}
	if c.stage != nil {
		schema, runs = c.schema, c.stage.Runs()
	}
	rb, err := json.Marshal(runs)
	if err != nil {
		return fmt.Errorf("keep the copy of %s at %s: %w", coll, at, err)
	}
	md := schema.Metadata()
	keys := append(md.Keys(), metaKeptCollection, metaKeptAt, metaKeptSnapshot, metaKeptTable, metaKeptFields, metaKeptRuns)
	vals := append(md.Values(), coll, at, snap, string(desc), user, string(rb))
	kept := arrow.NewSchema(schema.Fields(), func() *arrow.Metadata { m := arrow.NewMetadata(keys, vals); return &m }())
	if err := st.PutPending(source, keptName(coll, at), kept, nil); err != nil {
		return fmt.Errorf("keep the copy of %s at %s: %w", coll, at, err)
	}
	c.keep()
	return nil
}

// A keptCopy is a copy read back.
type keptCopy struct {
	snap   string        // the snapshot position's text
	fields []arrow.Field // the user columns as copied
	copy   stagedCopy    // the caller releases it
}

// readKept reads source's kept copy of coll for its re-snapshot at at
// (atText its text), and the table as copied into table; nil when there
// is none.
func readKept(ctx context.Context, st *store.Store, source, coll string, at frontier.Time, atText string, table any) (*keptCopy, error) {
	schema, recs, ok, err := st.Pending(source, keptName(coll, atText))
	if err != nil || !ok {
		return nil, err
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	md := schema.Metadata()
	get := func(k string) string {
		if i := md.FindKey(k); i >= 0 {
			return md.Values()[i]
		}
		return ""
	}
	if get(metaKeptCollection) != coll || get(metaKeptAt) != atText {
		return nil, nil // a hash collision: not this one
	}
	fail := func(err error) (*keptCopy, error) {
		return nil, fmt.Errorf("read the kept copy of %s at %s: %w", coll, atText, err)
	}
	user, err := pipe.DecodeSchema(get(metaKeptFields))
	if err == nil {
		err = json.Unmarshal([]byte(get(metaKeptTable)), table)
	}
	if err != nil {
		return fail(err)
	}
	var keys, vals []string
	for i, k := range md.Keys() {
		if !strings.HasPrefix(k, "rtr.kept.") {
			keys, vals = append(keys, k), append(vals, md.Values()[i])
		}
	}
	orig := arrow.NewSchema(schema.Fields(), func() *arrow.Metadata { m := arrow.NewMetadata(keys, vals); return &m }())
	k := &keptCopy{snap: get(metaKeptSnapshot), fields: user.Fields()}
	if md.FindKey(metaKeptRuns) < 0 {
		// An older ingest's: the rows are in the file. Staged anew, and
		// staged again by a later restart (the record stays as it is).
		cs := newCopyStager(ctx, st, source, at, -1)
		for _, r := range recs {
			rec := array.NewRecord(orig, r.Columns(), r.NumRows())
			err := cs.Data(coll, rec)
			rec.Release()
			if err != nil {
				cs.done(coll, err)
				return fail(err)
			}
		}
		if k.copy, err = cs.done(coll, nil); err != nil {
			return fail(err)
		}
		return k, nil // kept again, naming these files, at the hand-over
	}
	var runs [][]store.BatchMeta
	if err := json.Unmarshal([]byte(get(metaKeptRuns)), &runs); err != nil {
		return fail(err)
	}
	k.copy = stagedCopy{schema: orig, at: at, kept: true, nruns: len(runs)}
	for _, run := range runs {
		for _, b := range run {
			k.copy.rows += b.Rows
		}
	}
	if len(runs) > 0 {
		if !st.CopyFilesExist(source, runs) {
			return fail(errors.New("a staged file it names is gone"))
		}
		sg, err := st.NewCopyStage(source, orig, runs)
		if err != nil {
			return fail(err)
		}
		k.copy.stage = sg.Borrow()
	}
	return k, nil
}

// sweepKept removes source's kept copies for re-snapshots at positions
// the stream has passed (passed reports it of a position's text), then
// every staged copy file that no remaining kept copy names (those of
// copies a crash left unfinished or not committed). The stream calls it
// at its start, before it copies anything.
func sweepKept(st *store.Store, source string, passed func(at string) bool) error {
	named := map[string]bool{}
	err := st.SweepPending(source, func(_ string, md arrow.Metadata) bool {
		i := md.FindKey(metaKeptAt)
		if i < 0 || passed(md.Values()[i]) {
			return false
		}
		if j := md.FindKey(metaKeptRuns); j >= 0 {
			var runs [][]store.BatchMeta
			if err := json.Unmarshal([]byte(md.Values()[j]), &runs); err != nil {
				return false
			}
			for _, run := range runs {
				for _, b := range run {
					named[b.File] = true
				}
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	_, err = st.SweepCopies(source, named)
	return err
}
