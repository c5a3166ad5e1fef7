package snapshot

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// errSink is a memSink that records definite errors instead of failing.
type errSink struct {
	*memSink
	errs map[string][]string
	at   map[string]frontier.Time
}

func (s *errSink) Error(coll string, at frontier.Time, msg string) error {
	s.errs[coll] = append(s.errs[coll], msg)
	s.at[coll] = at
	return nil
}

// TestSnapshotBadValueFailsItsTable: a value Arrow's type cannot hold
// fails its table with a definite error at the snapshot's time naming the
// table, column, row key (or the row) and the value; the other tables are
// copied whole. Both COPY formats, and a rewind running over the failed
// table's later changes.
func TestSnapshotBadValueFailsItsTable(t *testing.T) {
	dsn, conn := testDB(t, 3)
	mustExec(t, conn, `
		CREATE TABLE badts (id int PRIMARY KEY, ts timestamp, note text);
		ALTER TABLE badts REPLICA IDENTITY FULL;
		INSERT INTO badts SELECT g, '2024-01-01'::timestamp + g * interval '1 day', 'n' || g FROM generate_series(1, 200) g;
		INSERT INTO badts VALUES (1000, '294276-12-31 23:59:59.999999', 'max');
		CREATE TABLE sentinel (ts timestamptz, v int);
		ALTER TABLE sentinel REPLICA IDENTITY FULL;
		INSERT INTO sentinel VALUES ('2024-01-01 00:00:00+00', 1), ('294247-01-10 04:00:54.775807+00', 2);
		CREATE TABLE badnum (id int PRIMARY KEY, n numeric(10,2));
		ALTER TABLE badnum REPLICA IDENTITY FULL;
		INSERT INTO badnum VALUES (1, 11.00), (2, 'NaN');
		CREATE TABLE badiv (id int PRIMARY KEY, iv interval);
		ALTER TABLE badiv REPLICA IDENTITY FULL;
		INSERT INTO badiv VALUES (1, '1 day'), (2, '2562047788 hours');
		CREATE TABLE rwbad (id int PRIMARY KEY, ts timestamp);
		ALTER TABLE rwbad REPLICA IDENTITY FULL;
		INSERT INTO rwbad VALUES (1, '2024-01-01');
		CREATE PUBLICATION pubbad FOR TABLE items, other, badts, sentinel, badnum, badiv, rwbad`)
	want := map[string]string{
		"public.badts":    "column ts: parse timestamp \"294276-12-31 23:59:59.999999\": out of range|key (id)=(1000)",
		"public.sentinel": "column ts: parse timestamptz \"294247-01-10 04:00:54.775807+00\": out of range|row (ts, v)=(294247-01-10 04:00:54.775807+00, 2)",
		"public.badnum":   "column n: parse numeric \"NaN\": not representable as decimal128(10,2)|key (id)=(2)",
		"public.badiv":    "column iv: parse interval \"2562047788:00:00\": out of range|key (id)=(2)",
		"public.rwbad":    "rewind|column ts: parse timestamp \"294276-12-31 23:59:59.999999\": out of range|row (id, ts)=(9, 294276-12-31 23:59:59.999999)",
	}
	for _, format := range []string{"auto", "text"} {
		t.Run(format, func(t *testing.T) {
			slot := uniqueSlot(t, conn)
			if _, _, err := EnsureSlot(t.Context(), conn, slot); err != nil {
				t.Fatal(err)
			}
			// Changes after the slot's start, to be rewound: one to a
			// failed table, one to a good one.
			mustExec(t, conn, "UPDATE badts SET note = 'x' WHERE id = 1; UPDATE items SET v = 'rw' WHERE id = 1")
			defer mustExec(t, conn, "UPDATE badts SET note = 'n1' WHERE id = 1")
			// A value the rewind meets but the copy does not see.
			mustExec(t, conn, "INSERT INTO rwbad VALUES (9, '294276-12-31 23:59:59.999999'); UPDATE rwbad SET ts = '2024-01-02' WHERE id = 9")
			defer mustExec(t, conn, "DELETE FROM rwbad WHERE id = 9")
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			sink := &errSink{memSink: newMemSink(), errs: map[string][]string{}, at: map[string]frontier.Time{}}
			res, err := PG(ctx, Config{Upstream: upstream.MustParsePostgres(dsn), Publication: "pubbad", Slot: slot, Format: format,
				Parallel: 2, BatchRows: 16}, sink)
			if err != nil {
				t.Fatalf("snapshot failed as a whole: %v", err)
			}
			for coll, parts := range want {
				msgs := sink.errs[coll]
				if len(msgs) != 1 {
					t.Errorf("%s: errors %q, want one", coll, msgs)
					continue
				}
				for _, p := range append(strings.Split(parts, "|"), coll) {
					if !strings.Contains(msgs[0], p) {
						t.Errorf("%s: error %q does not name %q", coll, msgs[0], p)
					}
				}
				if sink.at[coll] != (frontier.Time{}) {
					t.Errorf("%s: error at %v, want the snapshot's time 0", coll, sink.at[coll])
				}
			}
			for _, coll := range []string{"public.items", "public.other"} {
				if len(sink.errs[coll]) != 0 {
					t.Errorf("%s: unexpected errors %q", coll, sink.errs[coll])
				}
				if n := len(sink.rows[coll]); n != 3 {
					t.Errorf("%s: %d rows, want 3: %v", coll, n, sink.rows[coll])
				}
			}
			for _, tr := range res.Tables {
				if (want[tr.Name] != "") != (tr.Error != "") {
					t.Errorf("result of %s: error %q", tr.Name, tr.Error)
				}
			}
		})
	}
}
