package kafkafmt

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// Evolver is implemented by envelopes whose columns can change while they
// run (upsert over Avro values, debezium): when Add returns a
// *SwitchError, the caller hands over the rows added so far and the
// progress below the record, then calls Evolve with the record's position
// and hands over a reset of the collection there (pipe.Sink.Reset, with
// Evolve's schema) and the rows Evolve emitted, then adds the record
// again. The collection's new generation starts at that position: every
// key's current row in the new columns (a re-snapshot of the state), then
// the records from it on, read with the new reader.
type Evolver interface {
	// Evolve makes the reader the last *SwitchError (or Target) named,
	// calls reset with the collection's new user columns, then emits (each
	// record the callee's to release), in records of a few thousand rows,
	// an insertion at (part, off) of every key's current row in them.
	Evolve(part int32, off int64, reset func(*arrow.Schema) error, emit func(arrow.Record) error) error
	// Target names the reader a switch goes to without a record: the
	// columns of a generation the store has (user), whose Avro value
	// reader is valueVersion of its subject (0 for a debezium envelope,
	// whose columns are user's).
	Target(ctx context.Context, user *arrow.Schema, valueVersion int) error
}

// snapshotChunk is how many rows of a state re-snapshot go into one record.
const snapshotChunk = 8192

// switcher is a value format that can switch its reader (Avro).
type switcher interface {
	switchReader() error
	SwitchTo(ctx context.Context, version int) error
}

// Target implements Evolver.
func (d *upsertDecoder) Target(ctx context.Context, _ *arrow.Schema, version int) error {
	return targetValue(ctx, d.cfg.Value, version)
}

// targetValue makes version of value's subject the next reader
// (Evolver.Target).
func targetValue(ctx context.Context, value Format, version int) error {
	sw, ok := value.(switcher)
	if !ok {
		return fmt.Errorf("switch reader: value format %s has one reader", value.Name())
	}
	return sw.SwitchTo(ctx, version)
}

// Evolve implements Evolver: the value column takes the new reader's type;
// the state's values stay as they are (framed with the schema id they
// were written with, which the new reader resolves).
func (d *upsertDecoder) Evolve(part int32, off int64, reset func(*arrow.Schema) error, emit func(arrow.Record) error) error {
	sw, ok := d.cfg.Value.(switcher)
	if !ok {
		return fmt.Errorf("switch reader: value format %s has one reader", d.cfg.Value.Name())
	}
	if d.rows > 0 || len(d.touched) > 0 || len(d.queue) > 0 {
		return errors.New("switch reader: rows not flushed")
	}
	if err := sw.switchReader(); err != nil {
		return err
	}
	d.vc = d.cfg.Value.NewColumn()
	fields := []arrow.Field{
		{Name: "key", Type: d.cfg.Key.Type(), Nullable: true},
		{Name: "value", Type: d.cfg.Value.Type(), Nullable: true},
	}
	d.retype(fields)
	if err := reset(arrow.NewSchema(fields, nil)); err != nil {
		return err
	}
	return d.resnapshot(part, off, emit)
}

// retype makes fields the decoder's user columns.
func (d *base) retype(fields []arrow.Field) {
	md := d.schema.Metadata()
	d.schema = pipe.DataSchema(fields, frontier.DomainKafka, md)
}

// resnapshot emits an insertion at (part, off) of every live key's value:
// those of the table, then those of the backing the table does not hold.
func (d *upsertDecoder) resnapshot(part int32, off int64, emit func(arrow.Record) error) error {
	flush := func() error {
		if d.rows < snapshotChunk {
			return nil
		}
		return emit(d.flush(d.out.finish()...))
	}
	var err error
	d.state.each(func(id uint32) {
		if err == nil && d.state.live(id) {
			d.row(part, off, d.state.key(id), d.state.value(id), 1)
			err = flush()
		}
	})
	if err == nil && d.backing != nil {
		each, ok := d.backing.(interface {
			Each(fn func(key, value []byte) error) error
		})
		if !ok {
			return errors.New("switch reader: the state's backing cannot list its keys")
		}
		err = each.Each(func(k, v []byte) error {
			if _, in := d.state.findHashed(k, d.state.hash(k)); in {
				return nil // the table has the key's current value (or its deletion)
			}
			d.row(part, off, k, v, 1)
			return flush()
		})
	}
	if err != nil {
		return fmt.Errorf("switch reader: re-express the state: %w", err)
	}
	if d.rows > 0 {
		return emit(d.flush(d.out.finish()...))
	}
	return nil
}
