package kafkafmt

import (
	"errors"
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/bitutil"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// What a decoder does with a record that does not decode
// (Config.OnDecodeError, --on-decode-error).
const (
	// PolicyFail: a definite error of the collection at the record.
	PolicyFail = "fail"
	// PolicySkip: the record is dropped (and counted, Config.DecodeErrors).
	PolicySkip = "skip"
	// PolicyInline: a key or value that does not decode is kept as the
	// struct {decoded, decode_error, raw} (inlineFormat).
	PolicyInline = "inline"
)

// Policies lists the decode error policies.
var Policies = []string{PolicyFail, PolicySkip, PolicyInline}

// Normalizer is a Format whose equal values can come in different bytes
// (Avro written with different schema versions). Normal returns bytes
// that decode to the same value and are equal for equal values; the
// decoder keeps and compares those (upsert keys), so a key written with
// two versions is one key.
type Normalizer interface {
	Normal(data []byte) ([]byte, error)
}

// policyDecoder wraps an envelope: it normalizes keys and values
// (Normalizer) and applies the decode error policy.
type policyDecoder struct {
	Decoder
	cfg     Config
	kn, vn  Normalizer
	scratch kgo.Record
}

// withPolicy wraps dec when its formats normalize or its policy is not
// fail (or errors are counted). What dec implements besides Decoder
// (Stateful, Netting, Backed, Failer) is found through the wrapper with
// As.
func withPolicy(dec Decoder, cfg Config) Decoder {
	p := &policyDecoder{Decoder: dec, cfg: cfg}
	if cfg.Envelope != "debezium" { // which reads each record with its writer schema (ChangeFormat)
		p.kn, _ = cfg.Key.(Normalizer)
		p.vn, _ = cfg.Value.(Normalizer)
	}
	if p.kn == nil && p.vn == nil && cfg.OnDecodeError == PolicyFail && cfg.DecodeErrors == nil {
		return dec
	}
	return p
}

// Unwrap returns the envelope the policy wraps.
func (d *policyDecoder) Unwrap() Decoder { return d.Decoder }

// As returns dec as a T (Stateful, Netting, Backed, Failer), looking
// through the wrappers NewDecoder puts around an envelope.
func As[T any](dec Decoder) (T, bool) {
	for {
		if t, ok := dec.(T); ok {
			return t, true
		}
		u, ok := dec.(interface{ Unwrap() Decoder })
		if !ok {
			var zero T
			return zero, false
		}
		dec = u.Unwrap()
	}
}

// Add implements Decoder.
func (d *policyDecoder) Add(r *kgo.Record) error {
	if d.cfg.OnDecodeError == PolicyInline {
		// Kept in the row, but counted.
		for _, kv := range []struct {
			what string
			f    Format
			b    []byte
		}{{"key", d.cfg.Key, r.Key}, {"value", d.cfg.Value, r.Value}} {
			in, ok := kv.f.(*inlineFormat)
			if !ok || kv.b == nil {
				continue
			}
			if err := in.inner.Check(kv.b); err != nil {
				if err := d.failed(r, kv.what, in, err); err != nil {
					return err
				}
			}
		}
	}
	rec := r
	if (d.kn != nil && r.Key != nil) || (d.vn != nil && r.Value != nil) {
		d.scratch = *r
		rec = &d.scratch
		var err error
		if d.kn != nil && r.Key != nil {
			if rec.Key, err = d.kn.Normal(r.Key); err != nil {
				return d.failed(r, "key", d.cfg.Key, err)
			}
		}
		if d.vn != nil && r.Value != nil {
			if rec.Value, err = d.vn.Normal(r.Value); err != nil {
				return d.failed(r, "value", d.cfg.Value, err)
			}
		}
	}
	err := d.Decoder.Add(rec)
	if de, ok := errors.AsType[*DecodeError](err); ok {
		return d.apply(de)
	}
	if _, ok := errors.AsType[*SwitchError](err); ok {
		return d.failed(r, "value", d.cfg.Value, err)
	}
	return err
}

// failed is the error of r whose key or value (what) f refused.
func (d *policyDecoder) failed(r *kgo.Record, what string, f Format, err error) error {
	if _, ok := errors.AsType[*TransientError](err); ok {
		return err // the registry is away: not the record's fault
	}
	if _, ok := errors.AsType[*SwitchError](err); ok {
		if _, ok := As[Evolver](d.Decoder); ok {
			return err // the envelope switches its reader
		}
	}
	return d.apply(&DecodeError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Msg: fmt.Sprintf("%s (format %s): %v", what, f.Name(), err)})
}

// apply counts de and applies the policy: skip drops the record, fail
// (and inline, for what no format holds: a null upsert key, a header
// key) returns it.
func (d *policyDecoder) apply(de *DecodeError) error {
	if d.cfg.DecodeErrors != nil {
		d.cfg.DecodeErrors(de, d.cfg.OnDecodeError)
	}
	if d.cfg.OnDecodeError == PolicyFail {
		return de
	}
	return nil
}

// inlineFormat keeps what its format refuses: its column is the struct
// {decoded: the format's type, decode_error: utf8, raw: binary}, with
// decoded set when the bytes decode, decode_error and raw (the bytes)
// when they do not.
type inlineFormat struct {
	inner Format
	typ   *arrow.StructType
}

func newInline(f Format) *inlineFormat {
	return &inlineFormat{inner: f, typ: arrow.StructOf(
		arrow.Field{Name: "decoded", Type: f.Type(), Nullable: true},
		arrow.Field{Name: "decode_error", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "raw", Type: arrow.BinaryTypes.Binary, Nullable: true})}
}

func (f *inlineFormat) Name() string            { return f.inner.Name() }
func (f *inlineFormat) Type() arrow.DataType    { return f.typ }
func (f *inlineFormat) Check(data []byte) error { return nil }

// Normal normalizes what decodes and keeps the rest as it is; a registry
// that does not answer is still an error.
func (f *inlineFormat) Normal(data []byte) ([]byte, error) {
	n, ok := f.inner.(Normalizer)
	if !ok {
		return data, nil
	}
	out, err := n.Normal(data)
	if _, ok := errors.AsType[*TransientError](err); ok {
		return nil, err
	}
	if err != nil {
		return data, nil
	}
	return out, nil
}

func (f *inlineFormat) NewColumn() Column {
	return &inlineColumn{f: f, dec: f.inner.NewColumn(), errs: newBytesColumn(arrow.BinaryTypes.String), raws: newBytesColumn(arrow.BinaryTypes.Binary)}
}

// Raw implements Format: the raw bytes of an element that did not
// decode, else the inner format's Raw of the decoded value.
func (f *inlineFormat) Raw(arr arrow.Array, i int) ([]byte, error) {
	sa, ok := arr.(*array.Struct)
	if !ok || sa.NumField() != 3 {
		return nil, fmt.Errorf("inline format: column is %s, want %s", arr.DataType(), f.typ)
	}
	if !sa.Field(1).IsNull(i) {
		raw, ok := sa.Field(2).(*array.Binary)
		if !ok {
			return nil, fmt.Errorf("inline format: raw is %s, want binary", sa.Field(2).DataType())
		}
		return append([]byte(nil), raw.Value(i)...), nil
	}
	return f.inner.Raw(sa.Field(0), i)
}

type inlineColumn struct {
	f          *inlineFormat
	dec        Column
	errs, raws *bytesColumn
	valid      []bool
}

func (c *inlineColumn) Append(data []byte) {
	c.valid = append(c.valid, data != nil)
	switch err := c.checked(data); {
	case data == nil:
		c.dec.Append(nil)
		c.errs.Append(nil)
		c.raws.Append(nil)
	case err != nil:
		c.dec.Append(nil)
		c.errs.Append([]byte(err.Error()))
		c.raws.Append(data)
	default:
		c.dec.Append(data)
		c.errs.Append(nil)
		c.raws.Append(nil)
	}
}

func (c *inlineColumn) checked(data []byte) error {
	if data == nil {
		return nil
	}
	return c.f.inner.Check(data)
}

func (c *inlineColumn) Finish() arrow.Array {
	kids := []arrow.Array{c.dec.Finish(), c.errs.Finish(), c.raws.Finish()}
	n := len(c.valid)
	var valid *memory.Buffer
	nulls := 0
	bits := make([]byte, bitutil.BytesForBits(int64(n)))
	for i, ok := range c.valid {
		if ok {
			bitutil.SetBit(bits, i)
		} else {
			nulls++
		}
	}
	if nulls > 0 {
		valid = memory.NewBufferBytes(bits)
	}
	data := array.NewData(c.f.typ, n, []*memory.Buffer{valid}, []arrow.ArrayData{kids[0].Data(), kids[1].Data(), kids[2].Data()}, nulls, 0)
	defer data.Release()
	for _, k := range kids {
		defer k.Release()
	}
	c.valid = c.valid[:0]
	return array.MakeFromData(data)
}
