package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// The initial snapshot of a PostgreSQL or MySQL/MariaDB ingest is
// resumable (snapshot.Resume): snapStager stages each chunk's copied rows in the
// store (store.NewSnapshotStage) as they come, in runs of bounded size,
// and once a chunk is complete records it, with its files, in the
// snapshot record (store.WriteSnapshotRecord, docs/format-store.md). A
// restart reads the record back, and the snapshot copies only the chunks
// not done. When the snapshot returns, each table's stage goes to the
// reclocker (reclock.Reclocker.DataStaged), which commits it at the
// binding of time 0 without reading it into memory; the record is
// removed once that is durable (snapshotCommitted).

// snapRecord is the snapshot record: the plan, with each done chunk's
// rows and files (snapshot.Chunk.Staged holds a [][]store.BatchMeta).
type snapRecord struct {
	Format int    `json:"format"`
	Source string `json:"source"`
	*snapshot.Plan
}

// stagerSink is what a stager hands the tables' stages to (the driver).
type stagerSink interface {
	pipe.Sink
	DataStaged(collection string, in *arrow.Schema, stage *store.Stage, part string) error
}

// snapStager is the snapshot.ChunkSink of a resumable snapshot.
type snapStager struct {
	stagerSink
	ctx     context.Context
	st      *store.Store
	source  string
	log     *slog.Logger
	schemas map[string]*arrow.Schema // the data schemas of the tables copied
	budget  int64                    // bytes of rows in memory before the largest chunk's are staged
	every   time.Duration            // between progress lines

	rec     *snapRecord
	resumed bool // begin kept the earlier attempt's plan
	stages  map[string]*store.Stage
	chunks  map[snapshot.ChunkRef]*chunkBuf
	held    int64
	tables  map[string]*TableProgress
	began   time.Time
	lastLog time.Time
}

// chunkBuf is a chunk being copied: rows not yet staged, and its runs.
type chunkBuf struct {
	recs  []arrow.Record
	bytes int64
	rows  int64
	runs  [][]store.BatchMeta
}

// TableProgress is how far a table's copy got.
type TableProgress struct {
	Name string `json:"name"`
	// Rows and Bytes (of Arrow data) copied so far, those of chunks an
	// earlier attempt finished (ResumedRows) included.
	Rows        int64 `json:"rows"`
	Bytes       int64 `json:"bytes"`
	ResumedRows int64 `json:"resumed_rows,omitempty"`
	// EstimatedRows is pg_class.reltuples (MySQL: information_schema
	// TABLE_ROWS) when the snapshot was planned (0: unknown).
	EstimatedRows int64 `json:"estimated_rows,omitempty"`
	Chunks        int   `json:"chunks"`
	ChunksDone    int   `json:"chunks_done"`
	// RowsPerSecond is this attempt's copy rate; ETASeconds the time left
	// at that rate, when the estimate says (omitted otherwise).
	RowsPerSecond int64    `json:"rows_per_s"`
	ETASeconds    *float64 `json:"eta_s,omitempty"`
	copiedRows    int64    // this attempt
}

// rate sets RowsPerSecond and ETASeconds for elapsed time copying.
func (tp *TableProgress) rate(elapsed time.Duration) {
	r := float64(tp.copiedRows) / max(elapsed.Seconds(), 1e-3)
	tp.RowsPerSecond, tp.ETASeconds = int64(r), nil
	if left := tp.EstimatedRows - tp.Rows; tp.EstimatedRows > 0 && r > 0 && tp.ChunksDone < tp.Chunks {
		eta := float64(max(left, 0)) / r
		tp.ETASeconds = &eta
	}
}

// SnapshotProgress is the progress report a running ingest's snapshot
// writes to the store (store.SnapshotProgressName), for rtrctl status and
// wait-recent.
type SnapshotProgress struct {
	Source  string           `json:"source"`
	PID     int              `json:"pid"`
	Started time.Time        `json:"started"`
	Updated time.Time        `json:"updated"`
	Phase   string           `json:"phase"` // copy, rewind or commit
	Tables  []*TableProgress `json:"tables"`
}

// ReadSnapshotProgress returns the latest progress report of source's
// running or interrupted snapshot (store.ErrNotFound when none).
func ReadSnapshotProgress(st *store.Store, source string) (*SnapshotProgress, error) {
	b, err := st.ReadSnapshotFile(source, store.SnapshotProgressName)
	if err != nil {
		return nil, err
	}
	var p SnapshotProgress
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("read snapshot progress of %s: %w", source, err)
	}
	return &p, nil
}

// readSnapRecord returns source's snapshot record as a plan to resume,
// nil when there is none or it cannot be used (then Begin starts anew).
func readSnapRecord(st *store.Store, source string, log *slog.Logger) *snapRecord {
	b, err := st.ReadSnapshotRecord(source)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			log.Warn("snapshot record unreadable; the snapshot starts anew", "source", source, "error", err)
		}
		return nil
	}
	var r snapRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Format != 1 || r.Source != source || r.Plan == nil {
		log.Warn("snapshot record not usable; the snapshot starts anew", "source", source, "error", err)
		return nil
	}
	return &r
}

// plan is the earlier attempt's plan, if any.
func (s *snapStager) plan() *snapshot.Plan {
	if s.rec == nil {
		return nil
	}
	return s.rec.Plan
}

// begin is snapshot.Resume.Begin.
func (s *snapStager) begin(p *snapshot.Plan, kept bool) error {
	s.began, s.lastLog, s.resumed = time.Now(), time.Now(), kept
	if !kept {
		if s.rec != nil {
			s.log.Info("snapshot: the earlier attempt's chunks do not hold (the slot or a table changed); copying anew", "source", s.source)
		}
		if err := s.st.RemoveSnapshot(s.source); err != nil {
			return err
		}
		s.rec = &snapRecord{Format: 1, Source: s.source}
	}
	s.rec.Plan = p // the snapshot sets its chunks' positions as they are done
	// Done chunks of the tables copied now keep their files; a chunk
	// whose files are gone (its stage was committed or dropped) is copied
	// again.
	keep := map[string]bool{}
	s.stages, s.chunks, s.tables = map[string]*store.Stage{}, map[snapshot.ChunkRef]*chunkBuf{}, map[string]*TableProgress{}
	for ti := range p.Tables {
		pt := &p.Tables[ti]
		schema := s.schemas[pt.Name]
		if schema == nil {
			continue // not copied now (committed already)
		}
		tp := &TableProgress{Name: pt.Name, EstimatedRows: pt.EstimatedRows, Chunks: len(pt.Chunks)}
		s.tables[pt.Name] = tp
		var runs [][]store.BatchMeta
		for ci := range pt.Chunks {
			c := &pt.Chunks[ci]
			if !c.Done() {
				continue
			}
			var cr [][]store.BatchMeta
			if err := json.Unmarshal(c.Staged, &cr); err != nil || !s.filesExist(cr) {
				*c = snapshot.Chunk{Lo: c.Lo, Hi: c.Hi}
				continue
			}
			for _, run := range cr {
				for _, b := range run {
					keep[b.File] = true
				}
			}
			runs = append(runs, cr...)
			tp.ResumedRows += c.Rows
			tp.Rows += c.Rows
			tp.ChunksDone++
		}
		sg, err := s.st.NewSnapshotStage(s.source, schema, runs)
		if err != nil {
			return err
		}
		s.stages[pt.Name] = sg
	}
	swept, err := s.st.SweepSnapshot(s.source, keep)
	if err != nil {
		return err
	}
	var resumed int64
	for _, tp := range s.tables {
		resumed += tp.ResumedRows
	}
	if kept {
		s.log.Info("snapshot resumed", "source", s.source, "resumed_rows", resumed, "stray_files_removed", swept)
	}
	if err := s.writeRecord(); err != nil {
		return err
	}
	return s.writeProgress("copy")
}

// filesExist reports whether every file of runs is in the snapshot's
// directory.
func (s *snapStager) filesExist(runs [][]store.BatchMeta) bool {
	for _, run := range runs {
		for _, b := range run {
			if !s.st.SnapshotFileExists(s.source, b.File) {
				return false
			}
		}
	}
	return true
}

func (s *snapStager) writeRecord() error {
	b, err := json.MarshalIndent(s.rec, "", " ")
	if err != nil {
		return fmt.Errorf("snapshot record of %s: %w", s.source, err)
	}
	return s.st.WriteSnapshotRecord(s.source, append(b, '\n'))
}

// ChunkData implements snapshot.ChunkSink: the rows wait in memory until
// the chunk ends or the rows held pass the budget.
func (s *snapStager) ChunkData(c snapshot.ChunkRef, coll string, rec arrow.Record) error {
	cb := s.chunks[c]
	if cb == nil {
		cb = &chunkBuf{}
		s.chunks[c] = cb
	}
	rec.Retain()
	n := arrowutil.RecordBytes(rec)
	cb.recs, cb.bytes, cb.rows = append(cb.recs, rec), cb.bytes+n, cb.rows+rec.NumRows()
	s.held += n
	if tp := s.tables[coll]; tp != nil {
		tp.Rows += rec.NumRows()
		tp.copiedRows += rec.NumRows()
		tp.Bytes += n
	}
	for s.held > s.budget {
		var big *chunkBuf
		var bigColl string
		for ref, b := range s.chunks {
			if big == nil || b.bytes > big.bytes {
				big, bigColl = b, s.rec.Tables[ref.Table].Name
			}
		}
		if err := s.stageBuf(bigColl, big); err != nil {
			return err
		}
	}
	return s.maybeLog("copy")
}

// stageBuf stages cb's rows in memory as one more run of its chunk.
func (s *snapStager) stageBuf(coll string, cb *chunkBuf) error {
	if len(cb.recs) == 0 {
		return nil
	}
	sg := s.stages[coll]
	if sg == nil {
		return fmt.Errorf("snapshot: rows of %s, which is not being copied", coll)
	}
	run, err := sg.WriteRun(s.ctx, cb.recs...)
	for _, r := range cb.recs {
		r.Release()
	}
	s.held -= cb.bytes
	cb.recs, cb.bytes = nil, 0
	if err != nil {
		return fmt.Errorf("snapshot: stage rows of %s: %w", coll, err)
	}
	if len(run) > 0 {
		cb.runs = append(cb.runs, run)
	}
	return nil
}

// ChunkDone implements snapshot.ChunkSink: the chunk's rows are staged
// and the chunk, with its files, recorded done.
func (s *snapStager) ChunkDone(c snapshot.ChunkRef, coll string) error {
	cb := s.chunks[c]
	if cb == nil {
		cb = &chunkBuf{}
	}
	if err := s.stageBuf(coll, cb); err != nil {
		return err
	}
	delete(s.chunks, c)
	ch := &s.rec.Tables[c.Table].Chunks[c.Chunk]
	staged, err := json.Marshal(cb.runs)
	if err != nil {
		return fmt.Errorf("snapshot record of %s: %w", s.source, err)
	}
	ch.Rows, ch.Staged = cb.rows, staged
	if tp := s.tables[coll]; tp != nil {
		tp.ChunksDone++
	}
	return s.writeRecord()
}

// Progress implements pipe.Sink: the snapshot is complete, so the stages
// go to the reclocker first (before the binding the progress may mint).
func (s *snapStager) Progress(coll string, upper frontier.Frontier) error {
	if s.stages != nil {
		if err := s.handOver(); err != nil {
			return err
		}
		s.stages = nil
	}
	return s.stagerSink.Progress(coll, upper)
}

// Data implements pipe.Sink: rewound changes (copied rows come by chunk).
func (s *snapStager) Data(coll string, rec arrow.Record) error {
	if err := s.stagerSink.Data(coll, rec); err != nil {
		return err
	}
	return s.maybeLog("rewind")
}

// maybeLog logs a progress line per table and writes the progress report,
// every s.every.
func (s *snapStager) maybeLog(phase string) error {
	if time.Since(s.lastLog) < s.every {
		return nil
	}
	s.lastLog = time.Now()
	s.logProgress(phase)
	return s.writeProgress(phase)
}

// logProgress logs one line per table not yet done.
func (s *snapStager) logProgress(phase string) {
	elapsed := time.Since(s.began)
	for _, name := range slices.Sorted(maps.Keys(s.tables)) {
		tp := s.tables[name]
		if tp.ChunksDone == tp.Chunks && phase == "copy" {
			continue
		}
		tp.rate(elapsed)
		attrs := []any{"source", s.source, "table", name, "phase", phase, "rows", tp.Rows, "bytes", tp.Bytes,
			"chunks_done", tp.ChunksDone, "chunks", tp.Chunks, "rows_per_s", tp.RowsPerSecond}
		if tp.EstimatedRows > 0 {
			attrs = append(attrs, "estimated_rows", tp.EstimatedRows)
		}
		if tp.ETASeconds != nil {
			attrs = append(attrs, "eta", (time.Duration(*tp.ETASeconds * float64(time.Second))).Round(time.Second).String())
		}
		s.log.Info("snapshot progress", attrs...)
	}
}

// writeProgress writes the progress report for status and wait-recent.
func (s *snapStager) writeProgress(phase string) error {
	p := SnapshotProgress{Source: s.source, PID: os.Getpid(), Started: s.began.UTC(), Updated: time.Now().UTC(), Phase: phase}
	for _, name := range slices.Sorted(maps.Keys(s.tables)) {
		tp := s.tables[name]
		tp.rate(time.Since(s.began))
		p.Tables = append(p.Tables, tp)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("snapshot progress of %s: %w", s.source, err)
	}
	return s.st.WriteSnapshotFile(s.source, store.SnapshotProgressName, append(b, '\n'))
}

// handOver gives the tables' stages to the reclocker, which commits them
// at the binding of time 0, and logs what was copied.
func (s *snapStager) handOver() error {
	var copied, resumed int64
	for _, name := range slices.Sorted(maps.Keys(s.stages)) {
		sg := s.stages[name]
		delete(s.stages, name)
		if err := s.DataStaged(name, s.schemas[name], sg, s.rec.Plan.Partition); err != nil {
			return err
		}
		tp := s.tables[name]
		copied += tp.copiedRows
		resumed += tp.ResumedRows
	}
	s.log.Info("snapshot staged", "source", s.source, "rows_copied", copied, "rows_resumed", resumed, "took", time.Since(s.began).Round(time.Millisecond).String())
	return s.writeProgress("commit")
}

// release drops what is held in memory (the staged files stay for the
// next attempt).
func (s *snapStager) release() {
	for _, cb := range s.chunks {
		for _, r := range cb.recs {
			r.Release()
		}
	}
	s.chunks, s.held = nil, 0
}

// newSnapStager returns the stager of a snapshot of the tables in
// schemas (their data schemas) into sink, and the resume configuration
// for the snapshot (chunk sizes to be set by the caller); nil, nil when
// the snapshot cannot be staged (no store, or a sink that takes no
// stages: then it is not resumable). The caller releases the stager.
func newSnapStager(ctx context.Context, st *store.Store, source string, sink pipe.Sink, schemas map[string]*arrow.Schema, every time.Duration, log *slog.Logger) (*snapStager, *snapshot.Resume) {
	ss, ok := sink.(stagerSink)
	if !ok || st == nil {
		return nil, nil
	}
	if every <= 0 {
		every = 5 * time.Second
	}
	s := &snapStager{stagerSink: ss, ctx: ctx, st: st, source: source, log: log, schemas: schemas,
		budget: reclock.DefaultMemoryBudget, every: every, rec: readSnapRecord(st, source, log)}
	return s, &snapshot.Resume{Plan: s.plan(), Begin: s.begin}
}

// anew handles err, the error of a resumed snapshot that cannot be
// finished from the earlier attempt's chunks (cannot: their changes since
// cannot be rewound), by dropping the record and retrying soon in a new
// attempt of its own (the sink has rewound rows of this one). It returns
// err as it was when the snapshot was not resumed or cannot says no.
func (s *snapStager) anew(err error, cannot func(error) bool) error {
	if err == nil || s == nil || s.rec == nil || s.rec.Plan == nil || !cannot(err) {
		return err
	}
	// (A plan that did not hold was replaced by a new one in begin: that
	// one's chunks are this attempt's, and a rewind error is definite.)
	if !s.resumed {
		return err
	}
	s.log.Warn("snapshot: the chunks of the earlier run cannot be rewound; copying anew", "source", s.source, "error", err)
	if rerr := s.st.RemoveSnapshot(s.source); rerr != nil {
		return rerr
	}
	return retry.Soon(err, 0)
}

// removeStagedSnapshot is a source's snapshotCommitted: the snapshot's
// staged files and record are no longer needed.
func removeStagedSnapshot(st *store.Store, source string) error {
	if st == nil {
		return nil
	}
	return st.RemoveSnapshot(source)
}

// dataSchemaLSN is the data schema of a table's snapshot records.
func dataSchemaLSN(fields []arrow.Field) *arrow.Schema {
	return pipe.DataSchema(fields, frontier.DomainLSN, arrow.Metadata{})
}
