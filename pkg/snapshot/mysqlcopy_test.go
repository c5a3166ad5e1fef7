package snapshot

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// TestMySQLCopyAtItsPosition: a mid-stream copy taken while a writer
// runs holds the tables exactly as of the position S it returns: the
// definite snapshot rewound to S (snapshot.MySQL with Start S) has the
// same time-0 contents, every row at time 0.
func TestMySQLCopyAtItsPosition(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	conn := myConnect(t, m)
	myExec(t, conn, fmt.Sprintf("CREATE TABLE %s.acct (id int PRIMARY KEY, bal bigint NOT NULL, note varchar(40))", db))
	var vals []string
	for i := range 500 {
		vals = append(vals, fmt.Sprintf("(%d, 100, 'n%d')", i, i))
	}
	myExec(t, conn, fmt.Sprintf("INSERT INTO %s.acct VALUES %s", db, strings.Join(vals, ",")))
	writer := startMyWriter(t, m, func(w *client.Conn, i int64) error {
		_, err := w.Execute(fmt.Sprintf("UPDATE %s.acct SET bal = bal + 1, note = 'w%d' WHERE id = %d", db, i, i%500))
		return err
	})
	writes := &writer.writes
	for writes.Load() < 50 {
		time.Sleep(5 * time.Millisecond)
	}
	u := upstream.MustParseMySQL(m.URL())
	tables := []string{db + ".acct"}
	got := newMyRows()
	s, tabs, err := MySQLCopy(context.Background(), MySQLConfig{Upstream: u, Tables: tables}, got)
	if err != nil {
		t.Fatal(err)
	}
	for writes.Load() < 150 {
		time.Sleep(5 * time.Millisecond)
	}
	writer.stop()
	if len(tabs) != 1 || tabs[0].QualifiedName() != tables[0] {
		t.Fatalf("tables %v", tabs)
	}
	want := newMyRows()
	res, err := MySQL(context.Background(), MySQLConfig{Upstream: u, Tables: tables, Start: s}, want)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rewound() == 0 {
		t.Fatalf("the definite snapshot at %s rewound nothing: the writer did not run past the copy", s)
	}
	if d := myDiffRows(got.rows[tables[0]], want.rows[tables[0]]); d != "" || len(got.rows[tables[0]]) != 500 {
		t.Fatalf("the copy at %s differs from the table rewound to it (%d rows): %s", s, len(got.rows[tables[0]]), d)
	}
	for tm := range got.times {
		if !strings.HasSuffix(tm, "/0") {
			t.Fatalf("a copied row at %s, want time 0", tm)
		}
	}
	t.Logf("copy at %s equals the definite snapshot rewound there (%d changes rewound)", s, res.Rewound())
}
