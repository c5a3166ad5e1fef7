package kafkafmt

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// History streams the rows an append-only collection has just before a
// switch of its columns: records of its user columns (in the columns
// before the switch) and _diff, each valid until emit returns (the
// store's StreamAsOf as of the time before the new generation).
type History func(emit func(arrow.Record) error) error

// Historied is implemented by an envelope whose switch of columns
// re-expresses the rows the collection has, which only the store holds
// (the append-only envelope, none). Before Evolve the caller makes every
// row handed over before the switching record durable, so that the
// history is all of them.
type Historied interface {
	UseHistory(h History)
}

// UseHistory implements Historied.
func (d *noneDecoder) UseHistory(h History) { d.history = h }

// Target implements Evolver.
func (d *noneDecoder) Target(ctx context.Context, _ *arrow.Schema, version int) error {
	return targetValue(ctx, d.cfg.Value, version)
}

// rawSwitcher is an Avro value format: it switches its reader and
// re-encodes a value of the reader before.
type rawSwitcher interface {
	switcher
	rawer() func(arr arrow.Array, i int) ([]byte, error)
}

// Evolve implements Evolver for the append-only envelope: the collection's
// new generation holds every row it had (the history), its value
// re-expressed in the new reader's type, then the records from the switch
// on. A value is re-encoded with the reader before (framed with its
// schema id) and decoded with the new one: Avro's schema resolution
// (defaults for added fields, promotions, removed fields dropped) does the
// conversion, exactly as it reads a record written with the old version.
func (d *noneDecoder) Evolve(part int32, off int64, reset func(*arrow.Schema) error, emit func(arrow.Record) error) error {
	sw, ok := d.cfg.Value.(rawSwitcher)
	if !ok {
		return fmt.Errorf("switch reader: value format %s has one reader", d.cfg.Value.Name())
	}
	if d.rows > 0 {
		return errors.New("switch reader: rows not flushed")
	}
	if d.history == nil {
		return errors.New("switch reader: the append-only envelope has no history of the collection to re-express")
	}
	old := sw.rawer()
	if err := sw.switchReader(); err != nil {
		return err
	}
	d.vc = d.cfg.Value.NewColumn()
	var fields []arrow.Field
	for _, f := range d.schema.Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
			continue
		case "value":
			f.Type = d.cfg.Value.Type()
		}
		fields = append(fields, f)
	}
	d.retype(fields)
	if err := reset(arrow.NewSchema(slices.Clone(fields), nil)); err != nil {
		return err
	}
	err := d.history(func(rec arrow.Record) error {
		for lo := int64(0); lo < rec.NumRows(); lo += snapshotChunk {
			out, err := d.reexpress(rec, lo, min(lo+snapshotChunk, rec.NumRows()), part, off, old)
			if err != nil {
				return err
			}
			if err := emit(out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("switch reader: re-express the collection's rows: %w", err)
	}
	return nil
}

// reexpress returns rows [lo, hi) of rec (the collection's user columns
// before the switch, and _diff) in the decoder's columns, inserted at
// (part, off): the value converted with old (the reader before's Raw) and
// the new value format, every other column as it is.
func (d *noneDecoder) reexpress(rec arrow.Record, lo, hi int64, part int32, off int64, old func(arrow.Array, int) ([]byte, error)) (arrow.Record, error) {
	sc := rec.Schema()
	col := func(name string) (arrow.Array, error) {
		is := sc.FieldIndices(name)
		if len(is) != 1 {
			return nil, fmt.Errorf("the collection's rows have no column %s (%s)", name, sc)
		}
		return rec.Column(is[0]), nil
	}
	diffs, err := col(pipe.ColDiff)
	if err != nil {
		return nil, err
	}
	dv, ok := diffs.(*array.Int64)
	if !ok {
		return nil, fmt.Errorf("column %s is %s, want int64", pipe.ColDiff, diffs.DataType())
	}
	vals, err := col("value")
	if err != nil {
		return nil, err
	}
	// The other columns as they are (checked before anything is added).
	var same []arrow.Array
	for _, f := range d.schema.Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition, "value":
			continue
		}
		c, err := col(f.Name)
		if err == nil && !arrow.TypeEqual(c.DataType(), f.Type) {
			err = fmt.Errorf("column %s is %s, want %s", f.Name, c.DataType(), f.Type)
		}
		if err != nil {
			return nil, err
		}
		same = append(same, c)
	}
	for i := int(lo); i < int(hi); i++ {
		if vals.IsNull(i) {
			d.vc.Append(nil)
		} else {
			b, err := old(vals, i)
			if err == nil {
				err = d.cfg.Value.Check(b)
			}
			if err != nil {
				d.discard()
				return nil, fmt.Errorf("row %d: %w", i, err)
			}
			d.vc.Append(b)
		}
		d.reservedAt(part, off, dv.Value(i))
	}
	var cols []arrow.Array
	for _, f := range d.schema.Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
		case "value":
			cols = append(cols, d.vc.Finish())
		default:
			cols = append(cols, array.NewSlice(same[0], lo, hi))
			same = same[1:]
		}
	}
	return d.flush(cols...), nil
}

// discard drops the value and reserved columns of a reexpress that failed.
func (d *noneDecoder) discard() {
	d.vc.Finish().Release()
	d.times.finish(arrow.PrimitiveTypes.Uint64).Release()
	d.diffs.finish(arrow.PrimitiveTypes.Int64).Release()
	d.parts.Finish().Release()
	d.rows = 0
}

// The inline policy's column wraps the reader's type
// ({decoded, decode_error, raw}): it switches with its format.

// SwitchTo implements switcher.
func (f *inlineFormat) SwitchTo(ctx context.Context, version int) error {
	sw, ok := f.inner.(switcher)
	if !ok {
		return fmt.Errorf("switch reader: format %s has one reader", f.inner.Name())
	}
	return sw.SwitchTo(ctx, version)
}

// switchReader implements switcher: decoded takes the new reader's type.
func (f *inlineFormat) switchReader() error {
	sw, ok := f.inner.(switcher)
	if !ok {
		return fmt.Errorf("switch reader: format %s has one reader", f.inner.Name())
	}
	if err := sw.switchReader(); err != nil {
		return err
	}
	f.typ = newInline(f.inner).typ
	return nil
}

// rawer implements rawSwitcher: a decoded element re-encoded with the
// reader before, or the bytes of one that did not decode (which the new
// reader decodes if it can, as a record of them read after the switch).
func (f *inlineFormat) rawer() func(arr arrow.Array, i int) ([]byte, error) {
	rs, ok := f.inner.(rawSwitcher)
	if !ok {
		return func(arrow.Array, int) ([]byte, error) {
			return nil, fmt.Errorf("switch reader: format %s has one reader", f.inner.Name())
		}
	}
	inner, typ := rs.rawer(), f.typ
	return func(arr arrow.Array, i int) ([]byte, error) {
		sa, ok := arr.(*array.Struct)
		if !ok || !arrow.TypeEqual(arr.DataType(), typ) {
			return nil, fmt.Errorf("inline format: column is %s, want %s", arr.DataType(), typ)
		}
		if !sa.Field(1).IsNull(i) {
			return append([]byte(nil), sa.Field(2).(*array.Binary).Value(i)...), nil
		}
		return inner(sa.Field(0), i)
	}
}
