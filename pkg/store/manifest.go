package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// FormatVersion is the version of the store format this package writes
// and reads (rtrstore.json and every manifest carry it). A data manifest
// whose collection has more than its first generation says
// FormatGenerations instead, so that rtrctl versions that do not know
// generations refuse it rather than read both generations as one.
const FormatVersion = 1

// FormatGenerations is the manifest format of a collection with
// generations (the `generations` field); everything else is as in
// FormatVersion.
const FormatGenerations = 2

// Shard kinds.
const (
	kindData  = "data"
	kindRemap = "remap"
)

// Manifest is one version of a shard's metadata. Version N is stored in
// the file MANIFEST-<N, 20 digits>.json in the shard's directory; the
// highest version present is current. Manifests are immutable once written.
type Manifest struct {
	// Format is FormatVersion.
	Format int `json:"format"`
	// Kind is "data" for a collection, "remap" for a source's bindings.
	Kind string `json:"kind"`
	// Name is the collection or source name (unescaped).
	Name string `json:"name"`
	// Version is N, equal to the number in the file name.
	Version uint64 `json:"version"`
	// Schema is the user schema (without _time and _diff) as an Arrow IPC
	// stream holding only the schema message, base64 (standard, padded).
	// It round-trips field names, types, nullability and metadata exactly.
	// With generations it is the latest generation's schema.
	Schema string `json:"schema"`
	// Columns is the same schema in readable form; Schema is authoritative.
	Columns []ColumnInfo `json:"columns"`
	// Generations are a collection's generations, oldest first, when it
	// has more than one starting at 0 (format FormatGenerations). Absent,
	// the collection has one generation, from 0, with Schema.
	Generations []GenerationMeta `json:"generations,omitempty"`
	// Since: reads at times >= since are exact; times below it may have
	// been advanced to since by compaction.
	Since uint64 `json:"since"`
	// Upper: every update at a time < upper is durable; none at or after.
	Upper uint64 `json:"upper"`
	// Batches are the shard's batch files, in order of lower.
	Batches []BatchMeta `json:"batches"`
	// Errors are the definite errors, in order of time.
	Errors []ErrorMeta `json:"errors,omitempty"`
	// Domain is the time domain of a remap shard's frontiers ("" until the
	// first binding).
	Domain frontier.Domain `json:"domain,omitempty"`
	// LastBinding is a remap shard's latest binding, for validating the
	// next append without reading batches.
	LastBinding *BindingJSON `json:"last_binding,omitempty"`
	// Epoch is the writer lease epoch (S3 stores) of the last writer
	// that committed: a writer of a lower epoch commits no more.
	Epoch uint64 `json:"epoch,omitempty"`
	// Retired are the batch files a compaction removed from the list, with
	// when (Unix ms): cleanup keeps each for the grace period after that,
	// so a reader of an older version can finish. Carried forward by every
	// commit until then.
	Retired []RetiredFile `json:"retired,omitempty"`
	// Commit is a random identity of this manifest (16 hex digits), and
	// Parent the Commit of the version it was built on: a writer that
	// finds a newer version right after creating its own tells "built on
	// mine" (it won) from "mine was a pruned name reused" (it lost).
	Commit string `json:"commit,omitempty"`
	Parent string `json:"parent,omitempty"`
	// Checksum is "crc32c:<8 hex>": CRC-32C of the file without this
	// field (encodeManifest); it must stay the last field. A manifest
	// without it (written before it existed) is read unchecked.
	Checksum string `json:"checksum,omitempty"`
}

// RetiredFile is a batch file no longer listed since At (Unix ms).
type RetiredFile struct {
	File string `json:"file"`
	At   int64  `json:"at"`
}

// retire records in next the files of base that next no longer lists, at
// now, and forgets retirements older than grace.
func retire(base, next *Manifest, now time.Time, grace time.Duration) {
	listed := map[string]bool{}
	for _, b := range next.Batches {
		listed[b.File] = true
	}
	var out []RetiredFile
	for _, r := range base.Retired {
		if now.Sub(time.UnixMilli(r.At)) < grace && !listed[r.File] {
			out = append(out, r)
		}
	}
	for _, b := range base.Batches {
		if !listed[b.File] {
			out = append(out, RetiredFile{File: b.File, At: now.UnixMilli()})
		}
	}
	next.Retired = out
}

// ColumnInfo describes one user column.
type ColumnInfo struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// BatchMeta describes one immutable batch file.
type BatchMeta struct {
	// File is the file name within the shard directory.
	File string `json:"file"`
	// Lower and Upper bound the batch's times: lower <= _time < upper.
	Lower uint64 `json:"lower"`
	Upper uint64 `json:"upper"`
	// Rows is the number of rows; Bytes the file size.
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	// CRC32C is the Castagnoli CRC-32 of the whole file.
	CRC32C uint32 `json:"crc32c"`
	// Generation is the start of the generation the batch belongs to
	// (whose schema its file has); 0, omitted, for the first.
	Generation uint64 `json:"generation,omitempty"`
	// Cont marks a file that continues the run of the entry before it
	// (one append or merge cut into several files): the same interval and
	// generation, and every row of it after every row of that file in
	// (row, time) order. Omitted (false) for the first file of a run.
	Cont bool `json:"cont,omitempty"`
	// Groups index the file's record batches, in file order (absent for
	// files written before the index existed, which are read whole).
	Groups []GroupMeta `json:"groups,omitempty"`
}

// GenerationMeta is one generation of a collection: from Start on, the
// collection's contents are exactly the updates at times >= Start of the
// batches of this generation, in its schema.
type GenerationMeta struct {
	Start uint64 `json:"start"`
	// Schema and Columns are as in Manifest.
	Schema  string       `json:"schema"`
	Columns []ColumnInfo `json:"columns"`
}

// ErrorMeta is a definite error.
type ErrorMeta struct {
	Time    uint64 `json:"time"`
	Message string `json:"message"`
}

// BindingJSON is a binding in a manifest.
type BindingJSON struct {
	Time     uint64            `json:"time"`
	Frontier frontier.Frontier `json:"frontier"`
}

// manifestPrefix and manifestSuffix frame a manifest file name.
const (
	manifestPrefix = "MANIFEST-"
	manifestSuffix = ".json"
)

// manifestName returns the file name of version v.
func manifestName(v uint64) string {
	return fmt.Sprintf("%s%020d%s", manifestPrefix, v, manifestSuffix)
}

// parseManifestName returns the version of a manifest file name.
func parseManifestName(name string) (uint64, bool) {
	if !strings.HasPrefix(name, manifestPrefix) || !strings.HasSuffix(name, manifestSuffix) {
		return 0, false
	}
	s := name[len(manifestPrefix) : len(name)-len(manifestSuffix)]
	if len(s) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, false
	}
	return v, true
}

// encodeManifest renders a manifest (pure).
func encodeManifest(m *Manifest) ([]byte, error) {
	c := *m
	c.Checksum = ""
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	b = append(b, '\n')
	// The checksum goes last: before the closing brace.
	sum := fmt.Sprintf("%s%s%08x\"", checksumKey, checksumAlgo, crc32.Checksum(b, castagnoli))
	end := bytes.LastIndexByte(b, '}')
	return append(append(b[:end-1:end-1], sum...), b[end-1:]...), nil
}

const (
	checksumKey  = ",\n  \"checksum\": \""
	checksumAlgo = "crc32c:"
)

// checkManifestSum verifies a manifest's checksum, if it has one: the
// CRC-32C of the file with the checksum field cut out.
func checkManifestSum(b []byte) error {
	at := bytes.LastIndex(b, []byte(checksumKey))
	if at < 0 {
		if bytes.Contains(b, []byte(`"checksum"`)) {
			return fmt.Errorf("decode manifest: the checksum is not where rtrctl writes it (last, indented): the manifest was rewritten after it was written")
		}
		return nil
	}
	val := b[at+len(checksumKey):]
	q := bytes.IndexByte(val, '"')
	if q < 0 {
		return fmt.Errorf("decode manifest: unterminated checksum")
	}
	want := string(val[:q])
	rest := val[q+1:]
	without := append(append(make([]byte, 0, len(b)), b[:at]...), rest...)
	got := fmt.Sprintf("%s%08x", checksumAlgo, crc32.Checksum(without, castagnoli))
	if got != want {
		return fmt.Errorf("decode manifest: checksum mismatch (file says %s, contents give %s): the manifest was changed after it was written", want, got)
	}
	return nil
}

// decodeManifest parses and checks a manifest (pure).
func decodeManifest(b []byte) (*Manifest, error) {
	if err := checkManifestSum(b); err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if m.Format != FormatVersion && m.Format != FormatGenerations {
		return nil, fmt.Errorf("decode manifest: format version %d, this rtrctl reads versions %d and %d; use a matching rtrctl", m.Format, FormatVersion, FormatGenerations)
	}
	if m.Kind != kindData && m.Kind != kindRemap {
		return nil, fmt.Errorf("decode manifest: unknown shard kind %q", m.Kind)
	}
	if m.Since > m.Upper || (m.Upper > 0 && m.Since >= m.Upper) {
		return nil, fmt.Errorf("decode manifest: since %d is not below upper %d", m.Since, m.Upper)
	}
	if err := checkGenerations(&m); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	gens := m.gens()
	for i, b := range m.Batches {
		if b.Lower >= b.Upper || b.Upper > m.Upper {
			return nil, fmt.Errorf("decode manifest: batch %s has interval [%d, %d) outside [0, %d)", b.File, b.Lower, b.Upper, m.Upper)
		}
		g := genIndex(gens, b.Lower)
		if g < 0 || gens[g].Start != b.Generation || (g+1 < len(gens) && b.Upper > gens[g+1].Start) {
			return nil, fmt.Errorf("decode manifest: batch %s with interval [%d, %d) is not inside its generation from %d", b.File, b.Lower, b.Upper, b.Generation)
		}
		if i > 0 && b.Lower < m.Batches[i-1].Lower {
			return nil, fmt.Errorf("decode manifest: batches not in order of lower at %s", b.File)
		}
		if b.Cont && (i == 0 || m.Batches[i-1].Lower != b.Lower || m.Batches[i-1].Upper != b.Upper || m.Batches[i-1].Generation != b.Generation) {
			return nil, fmt.Errorf("decode manifest: batch %s continues a run, but the entry before it is not of the same interval and generation", b.File)
		}
		if err := checkGroups(b); err != nil {
			return nil, fmt.Errorf("decode manifest: batch %s: %w", b.File, err)
		}
		if strings.ContainsAny(b.File, `/\`) || b.File == "" || b.File[0] == '.' {
			return nil, fmt.Errorf("decode manifest: bad batch file name %q", b.File)
		}
	}
	return &m, nil
}

// checkGroups checks a batch's group index: groups in file order, inside
// the file, with the batch's rows and times (pure).
func checkGroups(b BatchMeta) error {
	if len(b.Groups) == 0 {
		return nil
	}
	var rows, at int64
	for _, g := range b.Groups {
		if g.Offset < at || g.Bytes <= 0 || g.Offset+g.Bytes > b.Bytes || g.Rows <= 0 || g.MinTime > g.MaxTime {
			return fmt.Errorf("group at offset %d (%d bytes, %d rows) is out of order or outside the file of %d bytes", g.Offset, g.Bytes, g.Rows, b.Bytes)
		}
		at, rows = g.Offset+g.Bytes, rows+g.Rows
	}
	if rows != b.Rows || b.Groups[0].Offset != 0 {
		return fmt.Errorf("the groups hold %d rows from offset %d, the batch %d rows", rows, b.Groups[0].Offset, b.Rows)
	}
	return nil
}

// checkGenerations checks the generations of a decoded manifest (pure).
func checkGenerations(m *Manifest) error {
	switch {
	case m.Format == FormatVersion && len(m.Generations) > 0:
		return fmt.Errorf("format %d has no generations, but the manifest lists %d", FormatVersion, len(m.Generations))
	case m.Format == FormatGenerations && len(m.Generations) == 0:
		return fmt.Errorf("format %d needs generations, and the manifest lists none", FormatGenerations)
	case m.Format == FormatGenerations && m.Kind != kindData:
		return fmt.Errorf("a %s shard has no generations", m.Kind)
	case len(m.Generations) == 0:
		return nil
	}
	for i, g := range m.Generations {
		if i > 0 && g.Start <= m.Generations[i-1].Start {
			return fmt.Errorf("generation starts do not ascend: %d after %d", g.Start, m.Generations[i-1].Start)
		}
	}
	first, last := m.Generations[0], m.Generations[len(m.Generations)-1]
	if first.Start > m.Since || last.Start > m.Upper {
		return fmt.Errorf("generations from %d to %d are not inside [since %d, upper %d]", first.Start, last.Start, m.Since, m.Upper)
	}
	if last.Schema != m.Schema {
		return fmt.Errorf("the schema is not the latest generation's")
	}
	return nil
}

// gens returns the manifest's generations, oldest first: Generations, or
// for a manifest without them one generation from 0 with its schema.
func (m *Manifest) gens() []GenerationMeta {
	if len(m.Generations) > 0 {
		return m.Generations
	}
	return []GenerationMeta{{Start: 0, Schema: m.Schema, Columns: m.Columns}}
}

// setGens records gs (oldest first, not empty) as the manifest's
// generations: in the format without generations when there is one from
// 0, so such a manifest stays what rtrctl before generations wrote.
func (m *Manifest) setGens(gs []GenerationMeta) {
	last := gs[len(gs)-1]
	m.Schema, m.Columns = last.Schema, last.Columns
	if len(gs) == 1 && gs[0].Start == 0 {
		m.Format, m.Generations = FormatVersion, nil
		return
	}
	m.Format, m.Generations = FormatGenerations, gs
}

// genIndex returns the index of the generation in force at t (the latest
// starting at or before t), or -1 when t is before all of them.
func genIndex(gs []GenerationMeta, t uint64) int {
	i := sort.Search(len(gs), func(i int) bool { return gs[i].Start > t })
	return i - 1
}

// clone returns a deep copy to derive the next version from.
func (m *Manifest) clone() *Manifest {
	c := *m
	c.Columns = slicesClone(m.Columns)
	c.Generations = slicesClone(m.Generations)
	c.Batches = slicesClone(m.Batches) // groups are never modified: shared
	c.Errors = slicesClone(m.Errors)
	c.Retired = slicesClone(m.Retired)
	if m.LastBinding != nil {
		lb := *m.LastBinding
		c.LastBinding = &lb
	}
	return &c
}

func slicesClone[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T(nil), s...)
}

// encodeSchema and decodeSchema are the pipe format's schema encoding
// (rtr.schema): base64 of an IPC stream with only the schema message.
var (
	encodeSchema = pipe.EncodeSchema
	decodeSchema = pipe.DecodeSchema
)

func columnInfos(s *arrow.Schema) []ColumnInfo {
	out := make([]ColumnInfo, 0, s.NumFields())
	for _, f := range s.Fields() {
		out = append(out, ColumnInfo{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
	}
	return out
}
