package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// Defaults of the file bounds in Options.
const (
	// DefaultFileBytes is the size at which a data run is cut into the
	// next file.
	DefaultFileBytes = 128 << 20
	// DefaultGroupRows is the most rows of one record batch (row group) of
	// a data batch file.
	DefaultGroupRows = 64 << 10
)

// GroupMeta indexes one record batch (row group) of a batch file, so that
// a reader loads, checks and decodes one group at a time.
type GroupMeta struct {
	// Rows is the number of rows of the group.
	Rows int64 `json:"rows"`
	// Offset and Bytes locate the group's bytes in the file: the Arrow IPC
	// message (metadata and body) of its record batch; for the first group
	// also everything before it (the magic and the schema message), so
	// that the groups cover the file up to the footer.
	Offset int64 `json:"offset"`
	Bytes  int64 `json:"bytes"`
	// CRC32C is the Castagnoli CRC-32 of those bytes.
	CRC32C uint32 `json:"crc32c"`
	// MinTime and MaxTime bound the group's _time values (data files).
	MinTime uint64 `json:"min_time"`
	MaxTime uint64 `json:"max_time"`
}

// fileBytes and groupRows are the store's file bounds with defaults.
func (s *Store) fileBytes() int64 {
	if s.opts.FileBytes > 0 {
		return s.opts.FileBytes
	}
	return DefaultFileBytes
}

func (s *Store) groupRows() int64 {
	if s.opts.GroupRows > 0 {
		return int64(s.opts.GroupRows)
	}
	return DefaultGroupRows
}

// encodeGroups writes records as one Arrow IPC file to w, pulling them
// from next (nil ends the file; the writer releases them) until the file
// holds at least limit bytes, and returns the file's size, CRC-32C and
// group index. timeCol is the index of the _time column (-1: none).
func encodeGroups(w io.Writer, schema *arrow.Schema, timeCol int, limit int64, next func() (arrow.Record, error)) (size int64, crc uint32, groups []GroupMeta, err error) {
	bw := &batchWriter{buf: bufio.NewWriterSize(w, 1<<20)}
	fw, err := ipc.NewFileWriter(bw, ipc.WithSchema(schema))
	if err != nil {
		return 0, 0, nil, fmt.Errorf("encode batch: %w", err)
	}
	for bw.n < limit {
		rec, err := next()
		if err != nil {
			return 0, 0, nil, err
		}
		if rec == nil {
			break
		}
		g := GroupMeta{Rows: rec.NumRows(), Offset: bw.n}
		bw.group = 0
		if timeCol >= 0 {
			g.MinTime, g.MaxTime = timeRange(rec.Column(timeCol).(*array.Uint64).Uint64Values())
		}
		err = fw.Write(rec)
		rec.Release()
		if err != nil {
			return 0, 0, nil, fmt.Errorf("encode batch: %w", err)
		}
		g.Bytes, g.CRC32C = bw.n-g.Offset, bw.group
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return 0, 0, nil, nil
	}
	if err := fw.Close(); err != nil {
		return 0, 0, nil, fmt.Errorf("encode batch: %w", err)
	}
	if err := bw.buf.Flush(); err != nil {
		return 0, 0, nil, fmt.Errorf("encode batch: %w", err)
	}
	return bw.n, bw.crc, groups, nil
}

func timeRange(ts []uint64) (lo, hi uint64) {
	lo = math.MaxUint64
	for _, t := range ts {
		lo, hi = min(lo, t), max(hi, t)
	}
	return lo, hi
}

// groupSlicer cuts the records next yields into groups of at most max
// rows, releasing them when cut.
func groupSlicer(maxRows int64, next func() (arrow.Record, error)) func() (arrow.Record, error) {
	var cur arrow.Record
	var at int64
	return func() (arrow.Record, error) {
		for cur == nil || at >= cur.NumRows() {
			if cur != nil {
				cur.Release()
				cur = nil
			}
			rec, err := next()
			if err != nil || rec == nil {
				return nil, err
			}
			cur, at = rec, 0
		}
		if at == 0 && cur.NumRows() <= maxRows {
			rec := cur
			cur = nil
			return rec, nil
		}
		end := min(at+maxRows, cur.NumRows())
		rec := cur.NewSlice(at, end)
		at = end
		return rec, nil
	}
}

// writeRun writes the updates next yields (records of the batch schema of
// the generation from genStart, sorted by (row, time) and consolidated;
// writeRun releases them) as one run of batch files covering [lower,
// upper): row groups of at most Options.GroupRows rows, a new file once
// one reaches Options.FileBytes. Each file is written under a temporary
// name, synced, closed and renamed, then the directory is synced once. The
// first file's entry starts the run, the others continue it (Cont). On
// error no file is left behind. No rows, no files.
func (sh *Shard) writeRun(ctx context.Context, lower, upper, genStart uint64, schema *arrow.Schema, next func() (arrow.Record, error)) (_ []BatchMeta, err error) {
	var out []BatchMeta
	defer func() {
		if err != nil {
			for _, b := range out {
				sh.st.fs.Remove(filepath.Join(sh.dir, b.File))
			}
		}
	}()
	rows := sh.st.groupRows()
	if sh.groupRows > 0 {
		rows = min(rows, sh.groupRows)
	}
	groups := groupSlicer(rows, next)
	var pending arrow.Record
	pull := func() (arrow.Record, error) {
		if pending != nil {
			rec := pending
			pending = nil
			return rec, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return groups()
	}
	defer func() {
		if pending != nil {
			pending.Release()
		}
	}()
	timeCol := schema.NumFields() - 2
	for {
		// Peek, so that no empty file is made.
		rec, err := pull()
		if err != nil {
			return nil, fmt.Errorf("write batch: %w", err)
		}
		if rec == nil {
			break
		}
		pending = rec
		var meta BatchMeta
		tmp, err := writeTempSync(sh.st.fs, sh.dir, "batch-", !sh.scratch, func(w io.Writer) (err error) {
			meta.Bytes, meta.CRC32C, meta.Groups, err = encodeGroups(w, schema, timeCol, sh.st.fileBytes(), pull)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("write batch: %w", err)
		}
		name := fmt.Sprintf("%020d-%020d-%016x.arrow", lower, upper, rand.Uint64())
		if err := sh.st.fs.Rename(tmp, filepath.Join(sh.dir, name)); err != nil {
			sh.st.fs.Remove(tmp)
			return nil, fmt.Errorf("write batch: rename: %w", err)
		}
		meta.File, meta.Lower, meta.Upper, meta.Generation, meta.Cont = name, lower, upper, genStart, len(out) > 0
		for _, g := range meta.Groups {
			meta.Rows += g.Rows
		}
		out = append(out, meta)
	}
	if len(out) == 0 {
		return nil, nil
	}
	if sh.scratch {
		return out, nil
	}
	if err := sh.st.fs.SyncDir(sh.dir); err != nil {
		return nil, fmt.Errorf("write batch: sync directory: %w", err)
	}
	return out, nil
}

// recordsOf yields recs one by one (retained for the consumer).
func recordsOf(recs ...arrow.Record) func() (arrow.Record, error) {
	return func() (arrow.Record, error) {
		if len(recs) == 0 {
			return nil, nil
		}
		rec := recs[0]
		recs = recs[1:]
		rec.Retain()
		return rec, nil
	}
}

// runReader yields the record batches of a run of batch files (one
// logical sorted run: a head entry and its continuations) one group at a
// time. Its files are opened when it is made, so that a compaction's
// cleanup cannot remove them under the reader.
type runReader struct {
	sh    *Shard
	want  *arrow.Schema
	head  []byte // the IPC stream form of want's schema message
	files []File
	metas []BatchMeta
	fi    int // current file
	gi    int // next group of the current file
	recs  []arrow.Record
	// lo and hi skip the groups with no time in [lo, hi).
	lo, hi uint64
	// buf holds the bytes of the group being decoded, reused for the
	// next: the IPC reader copies every buffer out of the message (no
	// record aliases it), and a fresh one per group was a fifth of a
	// streaming read's allocations.
	buf []byte
}

// openRun opens the files of a run; a missing file gives an error
// matching fs.ErrNotExist.
func (sh *Shard) openRun(ctx context.Context, metas []BatchMeta, want *arrow.Schema, head []byte, lo, hi uint64) (*runReader, error) {
	r := &runReader{sh: sh, want: want, head: head, metas: metas, lo: lo, hi: hi}
	for _, b := range metas {
		if err := ctx.Err(); err != nil {
			r.close()
			return nil, fmt.Errorf("read batch %s: %w", b.File, err)
		}
		f, err := sh.st.fs.Open(filepath.Join(sh.dir, b.File))
		if err != nil {
			r.close()
			return nil, fmt.Errorf("read batch %s: %w", b.File, err)
		}
		r.files = append(r.files, f)
	}
	return r, nil
}

func (r *runReader) close() {
	for _, f := range r.files {
		f.Close()
	}
	r.files = nil
	runs(r.recs).release()
	r.recs = nil
}

// next returns the next group (the caller releases it), nil at the end.
func (r *runReader) next() (arrow.Record, error) {
	for {
		if len(r.recs) > 0 {
			rec := r.recs[0]
			r.recs = r.recs[1:]
			return rec, nil
		}
		if r.fi >= len(r.metas) {
			return nil, nil
		}
		b, f := r.metas[r.fi], r.files[r.fi]
		path := filepath.Join(r.sh.dir, b.File)
		if len(b.Groups) == 0 {
			// A file written before the group index: read it whole.
			data, err := readAll(f)
			if err != nil {
				return nil, fmt.Errorf("read batch %s: %w", b.File, err)
			}
			recs, err := decodeBatch(path, data, b.CRC32C, r.want)
			if err != nil {
				return nil, fmt.Errorf("read batch %s: %w", b.File, err)
			}
			r.recs, r.fi = recs, r.fi+1
			continue
		}
		if r.gi >= len(b.Groups) {
			r.fi, r.gi = r.fi+1, 0
			continue
		}
		g := b.Groups[r.gi]
		if g.MaxTime < r.lo || g.MinTime >= r.hi {
			r.gi++
			continue
		}
		rec, err := r.readGroup(f, path, g, r.gi == 0)
		if err != nil {
			return nil, fmt.Errorf("read batch %s: %w", b.File, err)
		}
		r.gi++
		return rec, nil
	}
}

func readAll(f File) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// readGroup reads, checks and decodes one group. The first group of a
// file holds the file's magic and schema message, which must match want.
func (r *runReader) readGroup(f File, path string, g GroupMeta, first bool) (rec arrow.Record, err error) {
	if int64(cap(r.buf)) < g.Bytes {
		r.buf = make([]byte, g.Bytes)
	}
	buf := r.buf[:g.Bytes]
	if _, err := f.ReadAt(buf, g.Offset); err != nil {
		return nil, &CorruptError{Path: path, Detail: fmt.Sprintf("group at offset %d: %v", g.Offset, err)}
	}
	if got := crc32.Checksum(buf, castagnoli); got != g.CRC32C {
		return nil, &CorruptError{Path: path, Detail: fmt.Sprintf("group at offset %d: CRC-32C is %08x, the manifest says %08x", g.Offset, got, g.CRC32C)}
	}
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, &CorruptError{Path: path, Detail: fmt.Sprint("arrow decode: ", p)}
		}
	}()
	in := &bytesMessages{}
	if first {
		if len(buf) < 8 || !bytes.HasPrefix(buf, []byte("ARROW1")) {
			return nil, &CorruptError{Path: path, Detail: "no Arrow file magic"}
		}
		in.parts = [][]byte{buf[8:]}
	} else {
		in.parts = [][]byte{r.head, buf}
	}
	ir, err := ipc.NewReaderFromMessageReader(in, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, &CorruptError{Path: path, Detail: err.Error()}
	}
	defer ir.Release()
	if first {
		if d := fieldsDiff(ir.Schema().Fields(), r.want.Fields()); d != "" {
			return nil, &CorruptError{Path: path, Detail: "schema differs from the manifest: " + d}
		}
	}
	if !ir.Next() {
		if err := ir.Err(); err != nil {
			return nil, &CorruptError{Path: path, Detail: err.Error()}
		}
		return nil, &CorruptError{Path: path, Detail: fmt.Sprintf("group at offset %d holds no record batch", g.Offset)}
	}
	rec = ir.Record()
	if rec.NumRows() != g.Rows {
		return nil, &CorruptError{Path: path, Detail: fmt.Sprintf("group at offset %d has %d rows, the manifest says %d", g.Offset, rec.NumRows(), g.Rows)}
	}
	rec.Retain()
	return rec, nil
}

// schemaHead returns the IPC stream form of schema's schema message
// (without the end-of-stream marker), to decode a group's message with.
func schemaHead(schema *arrow.Schema) ([]byte, error) {
	var b bytes.Buffer
	w := ipc.NewWriter(&b, ipc.WithSchema(schema))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	out := b.Bytes()
	if len(out) < 8 {
		return nil, errors.New("encode schema: short stream")
	}
	return out[:len(out)-8], nil
}

// runsOf splits batches (of one generation, in manifest order) into runs:
// a head entry and the entries that continue it.
func runsOf(bs []BatchMeta) [][]BatchMeta {
	var out [][]BatchMeta
	for i := 0; i < len(bs); {
		j := i + 1
		for j < len(bs) && bs[j].Cont {
			j++
		}
		out = append(out, bs[i:j])
		i = j
	}
	return out
}

// openSources opens the runs of batches (of generation g) that hold times
// in [lo, hi) as merge sources; closeAll closes them. A missing file
// gives an error matching fs.ErrNotExist (a compaction replaced it: read
// the manifest again).
func (sh *Shard) openSources(ctx context.Context, g gen, batches []BatchMeta, lo, hi uint64) (srcs []*mergeSrc, closeAll func(), err error) {
	var rds []*runReader
	closeAll = func() {
		for _, r := range rds {
			r.close()
		}
	}
	head, err := g.sc.ipcHead()
	if err != nil {
		return nil, nil, err
	}
	for _, run := range runsOf(batches) {
		if run[0].Lower >= hi || run[0].Upper <= lo {
			continue
		}
		r, err := sh.openRun(ctx, run, g.sc.batch, head, lo, hi)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		rds = append(rds, r)
		srcs = append(srcs, &mergeSrc{next: r.next})
	}
	return srcs, closeAll, nil
}
