package reclock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// PipeOutput writes reclocked output in the pipe format: bindings
// streams, system-time data streams and source-wide progress streams.
type PipeOutput struct {
	W      *pipe.Writer
	Source string
}

// Binding implements Output.
func (o *PipeOutput) Binding(b frontier.Binding) error {
	return o.W.WriteBindings(o.Source, []frontier.Binding{b})
}

// Data implements Output.
func (o *PipeOutput) Data(collection string, schema *arrow.Schema, rec arrow.Record) error {
	h := pipe.Header{Kind: pipe.KindData, Collection: collection, Source: o.Source, Domain: frontier.DomainSystem}
	if key, ok := schema.Metadata().GetValue(pipe.KeyKey); ok && key != "" {
		h.Key = splitKey(key)
	}
	return o.W.WriteRecord(h, rec)
}

// Error implements Output.
func (o *PipeOutput) Error(collection string, t uint64, msg string) error {
	return o.W.WriteError(collection, frontier.DomainSystem, t, msg)
}

// Reset implements Output.
func (o *PipeOutput) Reset(collection string, t uint64, schema *arrow.Schema) error {
	return o.W.WriteReset(collection, frontier.DomainSystem, t, schema)
}

// Progress implements Output.
func (o *PipeOutput) Progress(upper uint64) error {
	if err := o.W.WriteProgress("", o.Source, frontier.Single(frontier.DomainSystem, upper)); err != nil {
		return err
	}
	return o.W.Flush()
}

func splitKey(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// PipeOptions configure RunPipe.
type PipeOptions struct {
	// Source overrides the source id taken from the input's rtr.source.
	Source string
	Options
}

// RunPipe reclocks the source-time pipe on in to out until in ends or ctx
// is cancelled. The source id and time domain come from the first stream
// (opts.Source overrides the id). Bindings are minted at most once per
// interval while source progress advances; a final binding is minted at
// the end of the input so everything complete is released.
func RunPipe(ctx context.Context, st *store.Store, in io.Reader, out io.Writer, opts PipeOptions) error {
	mem := opts.Mem
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	type item struct {
		stream *pipe.Stream
		rec    arrow.Record
		prog   *frontier.Frontier
		at     uint64
		msg    string
		reset  bool
		schema *arrow.Schema
		err    error
	}
	items := make(chan item)
	reader := pipe.NewReader(in, mem)
	defer reader.Close()
	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	go func() {
		defer close(items)
		send := func(it item) bool {
			select {
			case items <- it:
				return true
			case <-readCtx.Done():
				if it.rec != nil {
					it.rec.Release()
				}
				return false
			}
		}
		for {
			s, err := reader.Next()
			if err != nil {
				send(item{err: err})
				return
			}
			switch s.Header.Kind {
			case pipe.KindData:
				for {
					rec, err := s.NextRecord()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						send(item{err: err})
						return
					}
					if !send(item{stream: s, rec: rec}) {
						return
					}
				}
			case pipe.KindProgress:
				f, err := s.ReadProgress()
				if err != nil {
					send(item{err: err})
					return
				}
				if !send(item{stream: s, prog: &f}) {
					return
				}
			case pipe.KindError:
				t, msg, err := s.ReadError()
				if err != nil {
					send(item{err: err})
					return
				}
				if !send(item{stream: s, at: t, msg: msg}) {
					return
				}
			case pipe.KindReset:
				t, schema, err := s.ReadReset()
				if err != nil {
					send(item{err: err})
					return
				}
				if !send(item{stream: s, at: t, reset: true, schema: schema}) {
					return
				}
			case pipe.KindBindings:
				send(item{err: fmt.Errorf("stream %d: reclock takes source-time data and progress, not bindings (is this already reclocked?)", s.Index)})
				return
			}
		}
	}()

	w := pipe.NewWriter(out, mem)
	defer w.Close()
	var rc *Reclocker
	var domain frontier.Domain
	start := func(h pipe.Header) error {
		if rc != nil {
			if h.Domain != domain {
				return fmt.Errorf("reclock: stream in time domain %s after %s; one reclock serves one source", h.Domain, domain)
			}
			return nil
		}
		if h.Domain == frontier.DomainSystem {
			return fmt.Errorf("reclock: the input is already at system times")
		}
		source := opts.Source
		if source == "" {
			source = h.Source
		}
		if source == "" {
			return fmt.Errorf("reclock: the input names no source (rtr.source); pass --source")
		}
		domain = h.Domain
		var err error
		rc, err = New(ctx, st, source, domain, &PipeOutput{W: w, Source: source}, opts.Options)
		return err
	}
	interval := opts.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			if rc != nil {
				rc.Close()
			}
			return ctx.Err()
		case <-ticker.C:
			if rc != nil {
				if err := rc.Tick(ctx, false); err != nil {
					return err
				}
			}
		case it, ok := <-items:
			if !ok {
				return nil
			}
			if it.err != nil {
				if errors.Is(it.err, io.EOF) {
					if rc == nil {
						return nil
					}
					defer rc.Close()
					// Release everything complete before stopping.
					return rc.Tick(ctx, true)
				}
				return fmt.Errorf("reclock: %w", it.err)
			}
			if err := start(it.stream.Header); err != nil {
				if it.rec != nil {
					it.rec.Release()
				}
				return err
			}
			switch {
			case it.rec != nil:
				err := rc.Data(ctx, it.stream.Header.Collection, it.rec)
				it.rec.Release()
				if err != nil {
					return err
				}
			case it.prog != nil:
				if err := rc.SourceProgress(ctx, *it.prog); err != nil {
					return err
				}
			case it.reset:
				if err := rc.Reset(ctx, it.stream.Header.Collection, frontier.Time{Pos: it.at}, it.schema); err != nil {
					return err
				}
			default:
				if err := rc.Error(ctx, it.stream.Header.Collection, frontier.Time{Pos: it.at}, it.msg); err != nil {
					return err
				}
			}
		}
	}
}
