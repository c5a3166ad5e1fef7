package kafkafmt

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// Envelopes lists the envelope names NewDecoder accepts.
var Envelopes = []string{"none", "upsert", "debezium"}

// Config configures a Decoder.
type Config struct {
	// Envelope is "none" (the default), "upsert" or "debezium".
	Envelope string
	// Key and Value decode the record's key and value; nil means bytes.
	Key, Value Format
	// Collection and Source go into the data schema's metadata
	// (rtr.collection, rtr.source).
	Collection, Source string
	// OnDecodeError is the decode error policy: PolicyFail (default),
	// PolicySkip or PolicyInline (policy.go).
	OnDecodeError string
	// DecodeErrors, when set, is called with every record that does not
	// decode and the policy applied to it (for a metric and a log line).
	DecodeErrors func(err *DecodeError, policy string)
	// Columns and KeyColumns are a debezium collection's columns and key
	// columns (DebeziumColumns of its first record, or the collection's
	// schema in the store); the other envelopes ignore them.
	Columns    []arrow.Field
	KeyColumns []string
}

// DecodeError says that a record's bytes do not decode. It is definite:
// the same record always fails the same way.
type DecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	Msg       string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("topic %s partition %d offset %d: %s", e.Topic, e.Partition, e.Offset, e.Msg)
}

// Decoder turns records of one topic into a pipe data record (user
// columns, _time = offset, _diff, _partition = the partition number in
// decimal) in the kafka time domain. It is not safe for concurrent use.
type Decoder interface {
	// Schema is the data schema of the records Flush returns, with the
	// pipe metadata (rtr.kind data, rtr.collection, rtr.source,
	// rtr.time kafka, rtr.key).
	Schema() *arrow.Schema
	// Add decodes one record (not a control record). On a *DecodeError
	// nothing of the record is added. The record's key and value bytes
	// must not change until the next Flush (a decoder may apply a record
	// late, with others); r itself may be reused.
	Add(r *kgo.Record) error
	// Rows is the number of rows added since the last Flush.
	Rows() int
	// Flush returns the rows added since the last Flush (nil when there
	// are none); the caller releases it.
	Flush() arrow.Record
	// Release frees what the decoder holds outside the Go heap (nothing,
	// for the decoders here: their columns are Go slices).
	Release()
}

// Stateful is implemented by decoders that keep state (upsert). The state
// is rebuilt from a collection written by the decoder one batch at a time
// (store.Shard.ScanAsOf): ResetState, AddState for every batch, EndState.
type Stateful interface {
	// ResetState starts a rebuild: the state is empty.
	ResetState()
	// AddState adds updates of the collection: its user columns and _diff
	// (other columns, such as _time, are ignored), in any order, not
	// necessarily consolidated. Only their sum needs to be a valid state.
	AddState(rec arrow.Record) error
	// EndState ends a rebuild: the sum of the added updates, which must
	// hold every key at most once with multiplicity 1, becomes the state.
	EndState() error
	// StateSize is the number of keys held.
	StateSize() int
}

// Netting is implemented by decoders that can emit the net change of a
// batch (upsert): for each key touched between two Flushes, the
// retraction of its value before the batch and the insertion of its value
// after it, at the position of its last record, instead of a retraction
// and an insertion per record. Once consolidated at one time the two are
// the same; netting spares the store rows that cancel, which is most of
// them when keys are updated often.
type Netting interface {
	// NetFrom nets the records of partition p from offset from[p] on
	// (every offset of a partition not in from). The caller promises that
	// all netted records between two Flushes are released at one time:
	// ingest reports progress only after a Flush, so that one binding
	// covers them, except where bindings made before a restart split the
	// batch; from must be past those bindings.
	NetFrom(from map[int32]int64)
}

// NewDecoder returns the decoder of cfg.Envelope, with cfg's decode error
// policy (and normalization of the formats that need it, policy.go).
func NewDecoder(cfg Config) (Decoder, error) {
	if cfg.Key == nil {
		cfg.Key = bytesFormat{}
	}
	if cfg.Value == nil {
		cfg.Value = bytesFormat{}
	}
	switch cfg.OnDecodeError {
	case "":
		cfg.OnDecodeError = PolicyFail
	case PolicyFail, PolicySkip:
	case PolicyInline:
		// Every format but bytes (which refuses nothing) keeps what it
		// refuses in its column.
		if _, ok := cfg.Key.(bytesFormat); !ok {
			cfg.Key = newInline(cfg.Key)
		}
		if _, ok := cfg.Value.(bytesFormat); !ok {
			cfg.Value = newInline(cfg.Value)
		}
	default:
		return nil, fmt.Errorf("new decoder: unknown decode error policy %q (want fail, skip or inline)", cfg.OnDecodeError)
	}
	dec, err := newEnvelope(cfg)
	if err != nil {
		return nil, err
	}
	return withPolicy(dec, cfg), nil
}

// newEnvelope returns the envelope decoder of cfg.Envelope.
func newEnvelope(cfg Config) (Decoder, error) {
	switch cfg.Envelope {
	case "none", "":
		// partition and offset first: they identify a record, so the
		// store sorts a batch on them (cheap integer comparisons) instead
		// of on keys and values that may repeat.
		fields := []arrow.Field{
			{Name: "partition", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
			{Name: "offset", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
			{Name: "key", Type: cfg.Key.Type(), Nullable: true},
			{Name: "value", Type: cfg.Value.Type(), Nullable: true},
			{Name: "timestamp", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, Nullable: true},
			{Name: "header_keys", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
			{Name: "header_values", Type: arrow.ListOf(arrow.BinaryTypes.Binary), Nullable: true},
		}
		d := &noneDecoder{base: newBase(cfg, fields, []string{"partition", "offset"}),
			hk: newListColumn(arrow.BinaryTypes.String), hv: newListColumn(arrow.BinaryTypes.Binary)}
		return d, nil
	case "upsert":
		fields := []arrow.Field{
			{Name: "key", Type: cfg.Key.Type(), Nullable: true},
			{Name: "value", Type: cfg.Value.Type(), Nullable: true},
		}
		d := &upsertDecoder{base: newBase(cfg, fields, []string{"key"}), state: newStateTable(), gen: 1}
		d.out = kvRows{&d.base}
		return d, nil
	case "debezium":
		return newDebeziumDecoder(cfg)
	}
	return nil, fmt.Errorf("new decoder: unknown envelope %q (want none, upsert or debezium)", cfg.Envelope)
}

// base holds the columns shared by the envelopes: the key and value
// columns, and _time, _diff, _partition.
type base struct {
	cfg    Config
	schema *arrow.Schema
	kc, vc Column // the key and value columns
	times  fixed[uint64]
	diffs  fixed[int64]
	parts  *bytesColumn
	rows   int
	pnames [][]byte // partition number -> decimal name
}

func newBase(cfg Config, fields []arrow.Field, key []string) base {
	h := pipe.Header{Kind: pipe.KindData, Collection: cfg.Collection, Source: cfg.Source, Domain: frontier.DomainKafka, Key: key}
	return base{
		cfg: cfg, schema: pipe.DataSchema(fields, frontier.DomainKafka, h.Metadata()),
		kc: cfg.Key.NewColumn(), vc: cfg.Value.NewColumn(), parts: newBytesColumn(arrow.BinaryTypes.String),
	}
}

func (d *base) Schema() *arrow.Schema { return d.schema }
func (d *base) Rows() int             { return d.rows }
func (d *base) Release()              {}

// flush returns a record of the user columns cols (which it releases)
// and the reserved columns, and starts an empty batch.
func (d *base) flush(cols ...arrow.Array) arrow.Record {
	n := int64(d.rows)
	d.rows = 0
	cols = append(cols, d.times.finish(arrow.PrimitiveTypes.Uint64), d.diffs.finish(arrow.PrimitiveTypes.Int64), d.parts.Finish())
	rec := array.NewRecord(d.schema, cols, n)
	for _, c := range cols {
		c.Release()
	}
	return rec
}

// reservedAt appends the reserved columns of a row at (partition, offset).
func (d *base) reservedAt(partition int32, offset int64, diff int64) {
	d.times.append(uint64(offset))
	d.diffs.append(diff)
	p := int(partition)
	for len(d.pnames) <= p {
		d.pnames = append(d.pnames, []byte(strconv.Itoa(len(d.pnames))))
	}
	d.parts.Append(d.pnames[p])
	d.rows++
}

func (d *base) decodeErr(r *kgo.Record, format string, args ...any) *DecodeError {
	return &DecodeError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Msg: fmt.Sprintf(format, args...)}
}

// check validates the key and value of r.
func (d *base) check(r *kgo.Record) error {
	if r.Key != nil {
		if err := d.cfg.Key.Check(r.Key); err != nil {
			return d.decodeErr(r, "key (format %s): %v", d.cfg.Key.Name(), err)
		}
	}
	if r.Value != nil {
		if err := d.cfg.Value.Check(r.Value); err != nil {
			if sw, ok := errors.AsType[*SwitchError](err); ok {
				return sw // the envelope switches (Evolver) or refuses it (Refuse)
			}
			return d.decodeErr(r, "value (format %s): %v", d.cfg.Value.Name(), err)
		}
	}
	return nil
}

// noneDecoder is the append-only envelope.
type noneDecoder struct {
	base
	part   fixed[int32]
	off    fixed[int64]
	ts     fixed[int64]
	hk, hv *listColumn
	// history is the collection's rows before a switch of columns
	// (Historied).
	history History
}

var timestampMillis = &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}

// stringBytes returns the bytes of s without a copy, never nil (nil is a
// null to a Column, and "" is a header key like any other).
func stringBytes(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

func (d *noneDecoder) Add(r *kgo.Record) error {
	if r.Partition < 0 {
		return d.decodeErr(r, "negative partition")
	}
	if err := d.check(r); err != nil {
		return err
	}
	for _, h := range r.Headers {
		if !utf8.ValidString(h.Key) {
			return d.decodeErr(r, "header key %q is not valid UTF-8", h.Key)
		}
	}
	d.part.append(r.Partition)
	d.off.append(r.Offset)
	d.kc.Append(r.Key)
	d.vc.Append(r.Value)
	d.ts.append(r.Timestamp.UnixMilli())
	for _, h := range r.Headers {
		d.hk.elems.Append(stringBytes(h.Key))
		d.hv.elems.Append(h.Value)
	}
	d.hk.next()
	d.hv.next()
	d.reservedAt(r.Partition, r.Offset, 1)
	return nil
}

func (d *noneDecoder) Flush() arrow.Record {
	if d.rows == 0 {
		return nil
	}
	return d.flush(d.part.finish(arrow.PrimitiveTypes.Int32), d.off.finish(arrow.PrimitiveTypes.Int64),
		d.kc.Finish(), d.vc.Finish(), d.ts.finish(timestampMillis), d.hk.finish(), d.hv.finish())
}

// upsertDecoder is the upsert envelope: one row per key. The debezium
// envelope is one too, with other rows (out).
type upsertDecoder struct {
	base
	// out writes the rows of (key, value) pairs: kvRows for the upsert
	// envelope, the columns of a Debezium row for debezium.
	out upsertRows
	// state maps key bytes to the key's entry (stateTable): its current
	// value and whether it is live. Only live keys are held, except that
	// in net mode a key deleted in the batch stays until emitNet.
	state *stateTable
	live  int // keys with a value

	// Net mode (NetFrom): netFrom[p] is the first offset of partition p
	// whose records are netted (every offset when p is absent); touched
	// lists the keys netted in this batch (their entries' gen is gen),
	// with their values before the batch in before.
	net     bool
	netFrom map[int32]int64
	touched []touch
	before  []byte
	gen     uint64
	// queue holds netted records not yet applied (drain), at most
	// probeBatch; sink keeps what touching their state read.
	queue []queued
	sink  uint64

	loading map[string]*loadingKey // during a rebuild (ResetState)

	// backing, when set, holds the state beyond the table, which is then
	// a cache of about budget bytes (state_backing.go).
	backing Backing
	budget  int64
	got     []byte // scratch: a value read from the backing
	evicted int
	// evictedAt is 1 + the backing's Folds when a pass left the table
	// over budget (0: none did).
	evictedAt uint64
	// err is the backing's failure: the decoder stops (Failer).
	err error
}

// touch is a key netted in the batch: whether it was live before the
// batch and, if so, its value then (before[lo:hi]).
type touch struct {
	id     uint32
	had    bool
	lo, hi int
}

// NetFrom implements Netting.
func (d *upsertDecoder) NetFrom(from map[int32]int64) {
	d.net, d.netFrom = true, from
}

func (d *upsertDecoder) Add(r *kgo.Record) error {
	if r.Partition < 0 {
		return d.decodeErr(r, "negative partition")
	}
	if r.Key == nil {
		return d.decodeErr(r, "the upsert envelope needs a key, the record has a null key")
	}
	if d.err != nil {
		return d.err
	}
	if err := d.check(r); err != nil {
		return err
	}
	return d.put(r.Partition, r.Offset, r.Key, r.Value)
}

// put makes value the current value of key at (part, off); a nil value
// deletes the key. key and value must stay unchanged until the next
// Flush.
func (d *upsertDecoder) put(part int32, off int64, key, value []byte) error {
	if d.net {
		if from, ok := d.netFrom[part]; !ok || off >= from {
			d.queue = append(d.queue, queued{key: key, value: value, part: part, off: off})
			if len(d.queue) == probeBatch {
				return d.drain()
			}
			return nil
		}
		// A record not netted: the netted ones before it come first.
		d.emitNet()
	}
	h := d.state.hash(key)
	id, in, err := d.lookup(key, h)
	if err != nil {
		return err
	}
	ok := in && d.state.live(id)
	switch {
	case value == nil: // tombstone
		if ok {
			d.row(part, off, key, d.state.value(id), -1)
			d.state.setLive(id, false)
			d.state.setPos(id, part, off)
			d.forget(id)
			d.live--
		}
	case !ok:
		d.row(part, off, key, value, 1)
		if !in {
			id = d.state.add(key, h, len(value))
		}
		d.state.setValue(id, value)
		d.state.setLive(id, true)
		d.state.setPos(id, part, off)
		d.live++
	case bytes.Equal(d.state.value(id), value):
		// Same value again: the retraction and insertion cancel.
	default:
		d.row(part, off, key, d.state.value(id), -1)
		d.row(part, off, key, value, 1)
		d.state.setValue(id, value) // the rows hold copies
		d.state.setPos(id, part, off)
	}
	return nil
}

// deleteAll deletes every key at (part, off) (a Debezium truncate), as
// put with a nil value for each would. It needs every key in the table:
// a decoder with a backing refuses it (ingest gives the debezium envelope
// none).
func (d *upsertDecoder) deleteAll(part int32, off int64) error {
	if d.backing != nil {
		return fmt.Errorf("a truncate needs the whole state in memory, and the state is on disk")
	}
	if err := d.drain(); err != nil {
		return err
	}
	var keys [][]byte
	d.state.each(func(id uint32) {
		if d.state.live(id) {
			keys = append(keys, bytes.Clone(d.state.key(id)))
		}
	})
	for _, k := range keys {
		if err := d.put(part, off, k, nil); err != nil {
			return err
		}
	}
	return nil
}

// probeBatch is how many netted records drain looks up together.
const probeBatch = 32

// queued is a netted record waiting for drain. Its key and value are the
// record's bytes (the Decoder contract keeps them unchanged until Flush).
type queued struct {
	key, value []byte
	part       int32
	off        int64
}

// drain applies the queued records in order (addNet). It first touches
// the state each will read, so that the cache misses of the batch overlap:
// with a state larger than the caches they are most of the work.
func (d *upsertDecoder) drain() error {
	if len(d.queue) == 0 || d.err != nil {
		return d.err
	}
	var hs [probeBatch]uint64
	sink := d.sink
	for i := range d.queue {
		hs[i] = d.state.hash(d.queue[i].key)
		sink += d.state.touch(hs[i])
	}
	d.sink = sink
	if d.backing != nil {
		// Keys the table does not hold come from the backing first.
		for i := range d.queue {
			if _, _, err := d.lookup(d.queue[i].key, hs[i]); err != nil {
				d.err = err
				return err
			}
		}
	}
	for i := range d.queue {
		d.addNet(&d.queue[i], hs[i])
	}
	clear(d.queue)
	d.queue = d.queue[:0]
	return nil
}

// addNet applies q, whose key hashes to h, to the state and notes the key
// for the batch's net rows, which Flush emits.
func (d *upsertDecoder) addNet(q *queued, h uint64) {
	st := d.state
	id, ok := st.findHashed(q.key, h)
	if !ok {
		if q.value == nil {
			return // deleting what is not there
		}
		id = st.add(q.key, h, len(q.value))
	}
	live := ok && st.live(id)
	if !ok || st.gen(id) != d.gen {
		// First touch in this batch: note the value before it.
		t := touch{id: id, had: live, lo: len(d.before)}
		if live {
			d.before = append(d.before, st.value(id)...)
		}
		t.hi = len(d.before)
		d.touched = append(d.touched, t)
		st.setGen(id, d.gen)
		d.rows += 2 // at most; Flush counts what it emits
	}
	st.setPos(id, q.part, q.off)
	if q.value == nil {
		if live {
			st.setLive(id, false)
			d.live--
		}
		return
	}
	if !live {
		st.setLive(id, true)
		d.live++
	}
	st.setValue(id, q.value)
}

// Flush emits the net rows of the batch, then the batch.
func (d *upsertDecoder) Flush() arrow.Record {
	d.emitNet()
	d.evict()
	if d.rows == 0 {
		return nil
	}
	return d.flush(d.out.finish()...)
}

// emitNet appends the net rows of the keys touched in net mode since the
// last emitNet: for each whose value changed, the retraction of its value
// before and the insertion of its value after, at the position of its
// last record.
func (d *upsertDecoder) emitNet() {
	d.drain()
	if len(d.touched) > 0 {
		st := d.state
		d.rows -= 2 * len(d.touched)
		sink := d.sink
		for i, t := range d.touched {
			if i%probeBatch == 0 {
				// Overlap the cache misses of the next records (drain).
				for _, u := range d.touched[i:min(i+probeBatch, len(d.touched))] {
					sink += st.touchID(u.id)
				}
			}
			live := st.live(t.id)
			before := d.before[t.lo:t.hi]
			switch {
			case t.had && live && bytes.Equal(before, st.value(t.id)):
				continue // back where the batch started
			case t.had:
				d.netRow(t.id, before, -1)
			}
			if live {
				d.netRow(t.id, st.value(t.id), 1)
			} else {
				d.forget(t.id)
			}
		}
		d.sink = sink
		clear(d.touched)
		d.touched, d.before = d.touched[:0], d.before[:0]
	}
	d.gen++ // entries touched from now on are new to the batch
}

func (d *upsertDecoder) netRow(id uint32, value []byte, diff int64) {
	d.out.append(d.state.key(id), value)
	part, off := d.state.pos(id)
	d.reservedAt(part, off, diff)
}

func (d *upsertDecoder) row(part int32, off int64, key, value []byte, diff int64) {
	d.out.append(key, value)
	d.reservedAt(part, off, diff)
}

// upsertRows writes the rows of an upsert decoder and reads them back.
type upsertRows interface {
	// append appends the row of key and value (both non-nil).
	append(key, value []byte)
	// finish returns the user columns of the rows appended since the
	// last finish.
	finish() []arrow.Array
	// stateOf returns the key and value bytes of the rows of rec, a batch
	// of the collection (AddState); they are only compared or copied.
	stateOf(rec arrow.Record) (func(i int) (k, v []byte, err error), error)
}

// kvRows are the upsert envelope's rows: columns key and value, the
// bytes as the formats decode them.
type kvRows struct{ d *base }

func (o kvRows) append(key, value []byte) {
	o.d.kc.Append(key)
	o.d.vc.Append(value)
}

func (o kvRows) finish() []arrow.Array { return []arrow.Array{o.d.kc.Finish(), o.d.vc.Finish()} }

func (o kvRows) stateOf(rec arrow.Record) (func(i int) (k, v []byte, err error), error) {
	s := rec.Schema()
	ki, vi := s.FieldIndices("key"), s.FieldIndices("value")
	if len(ki) != 1 || len(vi) != 1 {
		return nil, fmt.Errorf("want columns key, value, _diff, got %v", s)
	}
	keys, vals := rec.Column(ki[0]), rec.Column(vi[0])
	return func(i int) ([]byte, []byte, error) {
		if keys.IsNull(i) || vals.IsNull(i) {
			return nil, nil, fmt.Errorf("row %d has a null key or value, which the upsert envelope never writes", i)
		}
		k, err := rawView(o.d.cfg.Key, keys, i)
		if err != nil {
			return nil, nil, err
		}
		v, err := rawView(o.d.cfg.Value, vals, i)
		return k, v, err
	}, nil
}

// StateSize implements Stateful.
func (d *upsertDecoder) StateSize() int {
	d.drain()
	return d.live
}

// ResetState implements Stateful.
func (d *upsertDecoder) ResetState() {
	d.state, d.live, d.touched, d.before, d.queue = newStateTable(), 0, d.touched[:0], d.before[:0], d.queue[:0]
	d.loading = map[string]*loadingKey{}
}

// loadingKey is a key during a rebuild: the values added for it whose
// multiplicities do not sum to zero (normally one, with multiplicity 1).
type loadingKey struct {
	kb   []byte
	vals []loadingVal
}

type loadingVal struct {
	v []byte
	n int64
}

// AddState implements Stateful.
func (d *upsertDecoder) AddState(rec arrow.Record) error {
	if d.loading == nil {
		d.ResetState()
	}
	err := d.StateRows(rec, func(k, v []byte, diff int64) error {
		lk := d.loading[string(k)]
		if lk == nil {
			lk = &loadingKey{kb: bytes.Clone(k)}
			d.loading[string(lk.kb)] = lk
		}
		j := 0
		for j < len(lk.vals) && !bytes.Equal(lk.vals[j].v, v) {
			j++
		}
		if j == len(lk.vals) {
			lk.vals = append(lk.vals, loadingVal{v: bytes.Clone(v)})
		}
		if lk.vals[j].n += diff; lk.vals[j].n == 0 {
			lk.vals = append(lk.vals[:j], lk.vals[j+1:]...)
			if len(lk.vals) == 0 {
				delete(d.loading, string(k))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load upsert state: %w", err)
	}
	return nil
}

// rawView is f.Raw(arr, i) without the copy for the formats that store
// the record's bytes as they are: the bytes stay in arr, so they are only
// compared or copied, never kept.
func rawView(f Format, arr arrow.Array, i int) ([]byte, error) {
	switch f.(type) {
	case bytesFormat, textFormat, jsonFormat: // they store the record's bytes
		switch a := arr.(type) {
		case *array.Binary:
			return a.Value(i), nil
		case *array.String:
			offs := a.ValueOffsets()
			return a.ValueBytes()[offs[i]-offs[0] : offs[i+1]-offs[0]], nil
		}
	}
	return f.Raw(arr, i)
}

// EndState implements Stateful.
func (d *upsertDecoder) EndState() error {
	for k, lk := range d.loading {
		switch {
		case len(lk.vals) > 1:
			return fmt.Errorf("load upsert state: key %q has %d values, but an upsert collection holds each key once", k, len(lk.vals))
		case lk.vals[0].n != 1:
			return fmt.Errorf("load upsert state: key %q has multiplicity %d, but an upsert collection holds each key once", k, lk.vals[0].n)
		}
		// Keys are distinct here and the state was reset: no lookup.
		v := lk.vals[0].v
		id := d.state.add(lk.kb, d.state.hash(lk.kb), len(v))
		d.state.setValue(id, v)
		d.state.setLive(id, true)
		d.live++
	}
	d.loading = nil
	return nil
}
