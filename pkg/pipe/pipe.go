// Package pipe reads and writes rtrctl's pipe format: the Arrow IPC byte
// stream that rtrctl's stages pass to each other on stdin and stdout.
//
// A pipe is a sequence of Arrow IPC streams back to back. Each stream is a
// schema message, record batches and an end-of-stream marker; its schema
// metadata (the rtr.* keys, see Header) says what the stream carries:
//
//   - data: updates (row, time, diff) of one collection;
//   - progress: the frontier (upper) of a collection or a whole source;
//   - bindings: reclocking bindings (t_sys, F) of a source;
//   - error: a definite error of a collection from some time on.
//
// Writer produces pipes and Reader consumes them. The Reader is a pure
// function of the bytes it reads: it never seeks, never reads past the
// end-of-stream marker of the stream it is in, handles short reads, and
// validates everything it returns, reporting problems as *FormatError with
// the stream, batch and column at fault. It never panics, whatever the
// input. docs/format-pipe.md specifies the format field by field.
package pipe

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// Version is the pipe format version this package reads and writes; it is
// carried in the rtr.version metadata key.
const Version = "1"

// Schema metadata keys of a pipe stream.
const (
	KeyVersion    = "rtr.version"
	KeyKind       = "rtr.kind"
	KeyCollection = "rtr.collection"
	KeySource     = "rtr.source"
	KeyTime       = "rtr.time"
	KeyKey        = "rtr.key"
	// KeySchema, on a reset stream, is the collection's user schema from
	// the reset on when it changes there (EncodeSchema).
	KeySchema = "rtr.schema"
)

// Reserved column names. User columns must not start with "_".
const (
	ColTime      = "_time"
	ColDiff      = "_diff"
	ColPartition = "_partition"
	ColUpper     = "_upper"
	ColMessage   = "_message"
)

// Kind says what a stream carries.
type Kind string

// The stream kinds.
const (
	// KindData streams carry updates of one collection: user columns plus
	// _time, _diff and, for partitioned domains, _partition.
	KindData Kind = "data"
	// KindProgress streams carry one frontier: _partition, _upper.
	KindProgress Kind = "progress"
	// KindBindings streams carry reclocking bindings: _time, _partition,
	// _upper.
	KindBindings Kind = "bindings"
	// KindError streams carry one definite error: _time, _message.
	KindError Kind = "error"
	// KindReset streams carry one reset of a collection: _time. From that
	// time on the collection holds only the updates that follow the reset
	// in the pipe (a TRUNCATE: none yet), in the schema rtr.schema names
	// (unchanged when absent).
	KindReset Kind = "reset"
)

// Kinds lists every kind, in a fixed order.
var Kinds = []Kind{KindData, KindProgress, KindBindings, KindError, KindReset}

// ParseKind checks that s names a known kind.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("parse kind: unknown stream kind %q (want one of data, progress, bindings, error, reset)", s)
}

// Header is what a stream's schema metadata says about it.
type Header struct {
	// Kind says what the stream carries.
	Kind Kind
	// Collection names the collection (public.orders, db.t, a Kafka topic).
	// Required for data and error streams; for progress streams empty means
	// the whole source; not allowed on bindings streams.
	Collection string
	// Source is the source id (e.g. "pg"). Required for bindings streams,
	// optional otherwise.
	Source string
	// Domain is the time domain of _time (data, error) or of the frontiers
	// (progress, bindings: there _time is always system milliseconds).
	Domain frontier.Domain
	// Key lists the key columns of a data stream (optional; data only).
	Key []string
	// Schema is a reset stream's new user schema (rtr.schema; optional,
	// reset only): nil when the schema does not change there.
	Schema *arrow.Schema
}

// Equal reports whether h and o are the same header.
func (h Header) Equal(o Header) bool {
	return h.Kind == o.Kind && h.Collection == o.Collection && h.Source == o.Source &&
		h.Domain == o.Domain && slices.Equal(h.Key, o.Key) &&
		(h.Schema == nil) == (o.Schema == nil) && (h.Schema == nil || h.Schema.Equal(o.Schema))
}

// Metadata returns the schema metadata that carries h: rtr.version,
// rtr.kind, rtr.collection and rtr.source when not empty, rtr.time, and
// rtr.key when there are key columns. It does not check h; ParseHeader of
// the result does.
func (h Header) Metadata() arrow.Metadata {
	keys := []string{KeyVersion, KeyKind}
	vals := []string{Version, string(h.Kind)}
	if h.Collection != "" {
		keys, vals = append(keys, KeyCollection), append(vals, h.Collection)
	}
	if h.Source != "" {
		keys, vals = append(keys, KeySource), append(vals, h.Source)
	}
	keys, vals = append(keys, KeyTime), append(vals, string(h.Domain))
	if len(h.Key) > 0 {
		keys, vals = append(keys, KeyKey), append(vals, strings.Join(h.Key, ","))
	}
	if h.Schema != nil {
		enc, _ := EncodeSchema(h.Schema) // writes to memory: cannot fail
		keys, vals = append(keys, KeySchema), append(vals, enc)
	}
	return arrow.NewMetadata(keys, vals)
}

// ParseHeader reads and checks the rtr.* keys of a stream's schema
// metadata. Keys outside the rtr. namespace are ignored; unknown rtr.* keys
// are ignored too, so that later minor additions stay readable. It does not
// look at the columns (the Reader checks those against the header).
func ParseHeader(md arrow.Metadata) (Header, error) {
	get := func(key string) (string, bool, error) {
		n, val := 0, ""
		for i, k := range md.Keys() {
			if k == key {
				n++
				val = md.Values()[i]
			}
		}
		if n > 1 {
			return "", false, fmt.Errorf("parse header: metadata key %s appears %d times, want once", key, n)
		}
		return val, n == 1, nil
	}
	var h Header
	v, ok, err := get(KeyVersion)
	if err != nil {
		return Header{}, err
	}
	if !ok {
		return Header{}, fmt.Errorf("parse header: schema metadata has no %s key: this is not an rtrctl pipe stream (a plain Arrow IPC stream needs rtr.version, rtr.kind and rtr.time metadata)", KeyVersion)
	}
	if v != Version {
		return Header{}, fmt.Errorf("parse header: %s is %q, this rtrctl reads version %s only: upgrade rtrctl or write version %s", KeyVersion, v, Version, Version)
	}
	v, ok, err = get(KeyKind)
	if err != nil {
		return Header{}, err
	}
	if !ok {
		return Header{}, fmt.Errorf("parse header: schema metadata has no %s key (want one of data, progress, bindings, error, reset)", KeyKind)
	}
	if h.Kind, err = ParseKind(v); err != nil {
		return Header{}, fmt.Errorf("parse header: %s: %w", KeyKind, err)
	}
	v, ok, err = get(KeyTime)
	if err != nil {
		return Header{}, err
	}
	if !ok {
		return Header{}, fmt.Errorf("parse header: schema metadata has no %s key (want one of lsn, mysql, mariadb, kafka, system_ms)", KeyTime)
	}
	if h.Domain, err = frontier.ParseDomain(v); err != nil {
		return Header{}, fmt.Errorf("parse header: %s: %w", KeyTime, err)
	}
	if h.Collection, ok, err = get(KeyCollection); err != nil {
		return Header{}, err
	} else if ok && h.Collection == "" {
		return Header{}, fmt.Errorf("parse header: %s is present but empty: leave the key out instead", KeyCollection)
	}
	if h.Source, ok, err = get(KeySource); err != nil {
		return Header{}, err
	} else if ok && h.Source == "" {
		return Header{}, fmt.Errorf("parse header: %s is present but empty: leave the key out instead", KeySource)
	}
	keys, hasKey, err := get(KeyKey)
	if err != nil {
		return Header{}, err
	}
	if hasKey {
		if h.Kind != KindData {
			return Header{}, fmt.Errorf("parse header: %s is only allowed on data streams, this is a %s stream", KeyKey, h.Kind)
		}
		h.Key = strings.Split(keys, ",")
		for _, k := range h.Key {
			if k == "" {
				return Header{}, fmt.Errorf("parse header: %s %q has an empty column name", KeyKey, keys)
			}
		}
	}
	enc, hasSchema, err := get(KeySchema)
	if err != nil {
		return Header{}, err
	}
	if hasSchema {
		if h.Kind != KindReset {
			return Header{}, fmt.Errorf("parse header: %s is only allowed on reset streams, this is a %s stream", KeySchema, h.Kind)
		}
		if h.Schema, err = DecodeSchema(enc); err != nil {
			return Header{}, fmt.Errorf("parse header: %s: %w", KeySchema, err)
		}
	}
	switch h.Kind {
	case KindData, KindError, KindReset:
		if h.Collection == "" {
			return Header{}, fmt.Errorf("parse header: a %s stream needs %s (the collection name)", h.Kind, KeyCollection)
		}
	case KindBindings:
		if h.Source == "" {
			return Header{}, fmt.Errorf("parse header: a bindings stream needs %s (the source id)", KeySource)
		}
		if h.Collection != "" {
			return Header{}, fmt.Errorf("parse header: a bindings stream belongs to a source, not a collection: drop %s", KeyCollection)
		}
	}
	return h, nil
}

// check validates h as ParseHeader would, for writers.
func (h Header) check() error {
	for _, k := range h.Key {
		if strings.Contains(k, ",") {
			return fmt.Errorf("check header: key column %q contains a comma, which rtr.key cannot carry", k)
		}
	}
	if _, err := ParseHeader(h.Metadata()); err != nil {
		return fmt.Errorf("check header: %w", err)
	}
	return nil
}

// FormatError reports input that is not a valid pipe, saying where.
type FormatError struct {
	// Stream is the 0-based index of the stream at fault.
	Stream int
	// Batch is the 0-based index of the record batch within the stream, or
	// -1 when the problem is not in a batch (schema, framing between
	// batches).
	Batch int
	// Column names the column at fault, or is empty.
	Column string
	// Offset is the byte offset in the input of the message being read, or
	// -1 when unknown.
	Offset int64
	// Msg says what is wrong.
	Msg string
	// Err is the underlying cause, if any.
	Err error
}

// Error prints "pipe: stream 3, batch 2, column _diff: msg: cause".
func (e *FormatError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipe: stream %d", e.Stream)
	if e.Batch >= 0 {
		fmt.Fprintf(&b, ", batch %d", e.Batch)
	}
	if e.Column != "" {
		fmt.Fprintf(&b, ", column %s", e.Column)
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " (byte offset %d)", e.Offset)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	if e.Err != nil {
		if e.Msg != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *FormatError) Unwrap() error { return e.Err }
