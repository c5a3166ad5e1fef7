package probe

import (
	"testing"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

func TestVisibleInsertLSN(t *testing.T) {
	const block, seg = 8192, 16 << 20
	tests := []struct {
		name string
		in   frontier.LSN
		want frontier.LSN
	}{
		{"mid page", 0x1926958, 0x1926958},
		{"just past a short page header", 5*block + 24, 5 * block},
		{"just past a long header at a segment start", 3*seg + 40, 3 * seg},
		{"short header offset at a segment start is not a header", 3*seg + 24, 3*seg + 24},
		{"page start itself", 7 * block, 7 * block},
		{"record ending right after a header", 5*block + 25, 5*block + 25},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := VisibleInsertLSN(tc.in, block, seg); got != tc.want {
				t.Fatalf("VisibleInsertLSN(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
