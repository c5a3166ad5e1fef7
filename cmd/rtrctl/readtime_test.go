package main

import (
	"testing"
	"time"
)

func TestParseSystemTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := func(t time.Time) uint64 { return uint64(t.UnixMilli()) }
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"now", ms(now)},
		{"-5m", ms(now.Add(-5 * time.Minute))},
		{"now-1h30m", ms(now.Add(-90 * time.Minute))},
		{"-250ms", ms(now) - 250},
		{"2024-11-29T17:06:40Z", 1732900000000},
		{"2024-11-29T18:06:40.5+01:00", 1732900000500},
		{"1970-01-01T00:00:00.101Z", 101},
	} {
		got, err := parseSystemTime(tc.in, now)
		if err != nil || got != tc.want {
			t.Errorf("parseSystemTime(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "5m", "now+5m", "-5x", "1969-12-31T23:59:59Z", "2024-11-29 17:06:40", "now-"} {
		if got, err := parseSystemTime(bad, now); err == nil {
			t.Errorf("parseSystemTime(%q) = %d, want an error", bad, got)
		}
	}
}
