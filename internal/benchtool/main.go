// Command benchtool makes inputs and baselines for `make bench`: a
// system-time pipe of N rows of (int64 key, ~20-byte string, float64), and
// a plain decode of a pipe (the baseline a store append is compared with).
// It is a development tool, not part of rtrctl.
package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchtool:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 1 {
		return errors.New("usage: benchtool gen-pipe ROWS RETRACT_PERCENT > FILE | benchtool decode < FILE")
	}
	switch args[0] {
	case "gen-pipe":
		if len(args) != 3 && len(args) != 4 {
			return errors.New("usage: benchtool gen-pipe ROWS RETRACT_PERCENT [FIRST_TIME]")
		}
		first := uint64(1)
		if len(args) == 4 {
			var err error
			if first, err = strconv.ParseUint(args[3], 10, 64); err != nil || first == 0 {
				return fmt.Errorf("bad FIRST_TIME %q: a positive integer", args[3])
			}
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		pct, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		return genPipe(os.Stdout, n, pct, first)
	case "decode":
		start := time.Now()
		rows, err := decode(os.Stdin)
		if err != nil {
			return err
		}
		el := time.Since(start)
		fmt.Printf("%d rows in %.3fs: %.0f rows/s\n", rows, el.Seconds(), float64(rows)/el.Seconds())
		return nil
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// genPipe writes n rows of collection bench.rows at system times first..,
// 64k rows a batch, then a progress record closing them. pct percent of
// the rows are retractions of earlier rows. The rows do not depend on
// first: two runs at different times hold the same rows.
func genPipe(w io.Writer, n, pct int, first uint64) error {
	mem := memory.DefaultAllocator
	pw := pipe.NewWriter(w, mem)
	h := pipe.Header{Kind: pipe.KindData, Collection: "bench.rows", Source: "bench", Domain: frontier.DomainSystem}
	schema := pipe.DataSchema([]arrow.Field{
		{Name: "key", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "value", Type: arrow.PrimitiveTypes.Float64},
	}, frontier.DomainSystem, h.Metadata())
	rng := rand.New(rand.NewPCG(1, 2))
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	const batch = 1 << 16
	var keys []int64
	for i := 0; i < n; i++ {
		key := rng.Int64()
		diff := int64(1)
		if len(keys) > 0 && rng.IntN(100) < pct {
			key = keys[rng.IntN(len(keys))]
			diff = -1
		} else {
			keys = append(keys, key)
		}
		b.Field(0).(*array.Int64Builder).Append(key)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%015d", key%1_000_000_000_000_000))
		b.Field(2).(*array.Float64Builder).Append(float64(key%1000) / 10)
		b.Field(3).(*array.Uint64Builder).Append(first + uint64(i/batch))
		b.Field(4).(*array.Int64Builder).Append(diff)
		if (i+1)%batch == 0 || i == n-1 {
			rec := b.NewRecord()
			err := pw.WriteRecord(h, rec)
			rec.Release()
			if err != nil {
				return err
			}
		}
	}
	if err := pw.WriteProgress("bench.rows", "bench", frontier.Single(frontier.DomainSystem, first+uint64(1+n/batch))); err != nil {
		return err
	}
	return pw.Close()
}

func decode(r io.Reader) (int64, error) {
	pr := pipe.NewReader(r, memory.DefaultAllocator)
	defer pr.Close()
	var rows int64
	for {
		s, err := pr.Next()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return rows, err
		}
		for {
			rec, err := s.NextRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return rows, err
			}
			if s.Header.Kind == pipe.KindData {
				rows += rec.NumRows()
			}
			rec.Release()
		}
	}
}
