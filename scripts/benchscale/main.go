// Command benchscale is a helper of scripts/bench-scale.sh: it copies the
// pipe on stdin (the output of `rtrctl read --format arrow`, whose data
// stream carries no progress) to stdout and closes it with a progress
// record of the collection at the given upper, so that `rtrctl store
// append` commits it.
//
//	benchscale close COLLECTION UPPER < in.arrow > out.arrow
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchscale:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 3 || args[0] != "close" {
		return errors.New("usage: benchscale close COLLECTION UPPER < in.arrow > out.arrow")
	}
	upper, err := strconv.ParseUint(args[2], 10, 64)
	if err != nil {
		return fmt.Errorf("bad UPPER %q: %w", args[2], err)
	}
	pr := pipe.NewReader(os.Stdin, memory.DefaultAllocator)
	defer pr.Close()
	pw := pipe.NewWriter(os.Stdout, memory.DefaultAllocator)
	for {
		s, err := pr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		for {
			rec, err := s.NextRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			err = pw.WriteRecord(s.Header, rec)
			rec.Release()
			if err != nil {
				return err
			}
		}
	}
	if err := pw.WriteProgress(args[1], "", frontier.Single(frontier.DomainSystem, upper)); err != nil {
		return err
	}
	return pw.Close()
}
