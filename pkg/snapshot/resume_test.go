package snapshot

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKeyRanges: the chunks of a key range cover every int64 exactly
// once (the first open below, the last open above), in order, and their
// conditions say so.
func TestKeyRanges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := [][3]int64{{1, 300000, 14}, {-5, 5, 3}, {0, 1, 10}, {math.MinInt64, math.MaxInt64, 7}, {10, 12, 100}}
	for range 50 {
		lo := r.Int64N(1<<40) - 1<<39
		cases = append(cases, [3]int64{lo, lo + 1 + r.Int64N(1<<30), 2 + r.Int64N(40)})
	}
	for _, c := range cases {
		chunks := keyRanges(c[0], c[1], c[2])
		if len(chunks) < 1 || int64(len(chunks)) > c[2] || chunks[0].Lo != nil || chunks[len(chunks)-1].Hi != nil {
			t.Fatalf("%v: %d chunks, first %v, last %v", c, len(chunks), chunks[0].Lo, chunks[len(chunks)-1].Hi)
		}
		for i := 1; i < len(chunks); i++ {
			if chunks[i].Lo == nil || chunks[i-1].Hi == nil || *chunks[i].Lo != *chunks[i-1].Hi || (chunks[i].Hi != nil && *chunks[i].Hi <= *chunks[i].Lo) {
				t.Fatalf("%v: chunk %d does not follow chunk %d", c, i, i-1)
			}
		}
		probes := []int64{math.MinInt64, math.MaxInt64, c[0], c[1], c[0] - 1, c[1] + 1}
		for range 100 {
			probes = append(probes, c[0]+r.Int64N(max(c[1]-c[0], 1)))
		}
		for _, v := range probes {
			n := 0
			for _, ch := range chunks {
				if ch.holds(v) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%v: %d is in %d chunks", c, v, n)
			}
		}
	}
	lo, hi := int64(5), int64(9)
	for _, c := range []struct {
		ch   Chunk
		want string
	}{{Chunk{Lo: &lo, Hi: &hi}, `"id" >= 5 AND "id" < 9`}, {Chunk{Hi: &hi}, `"id" < 9`}, {Chunk{Lo: &lo}, `"id" >= 5`}, {Chunk{}, ``}} {
		if got := c.ch.where("id", pgQuote); got != c.want {
			t.Errorf("where: %q, want %q", got, c.want)
		}
	}
}
