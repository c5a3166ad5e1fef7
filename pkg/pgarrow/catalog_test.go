package pgarrow_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// TestLoadTablesBatch: many tables with domains over domains, arrays of
// domains and enums are described in one round trip (a connection that
// does not prepare, behind the test proxy's round-trip clock), exactly as
// each is alone, and so are a Relation message's columns by Resolve.
func TestLoadTablesBatch(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	dsn := pg.CreateDatabase(t)
	setup := connect(t, dsn)
	ctx := t.Context()
	if _, err := setup.Exec(ctx, `CREATE TYPE mood AS ENUM ('sad', 'ok');
		CREATE DOMAIN money2 AS numeric(10,2); CREATE DOMAIN money3 AS money2 CHECK (VALUE > 0);
		CREATE SCHEMA "Odd"`); err != nil {
		t.Fatal(err)
	}
	const n = 30
	var names []pgarrow.TableName
	for i := 0; i < n; i++ {
		if _, err := setup.Exec(ctx, fmt.Sprintf(`CREATE TABLE "Odd"."T%d" (id int NOT NULL, m mood, ms mood[], d money3, ds money3[], v varchar(%d), a int[])`, i, i+1)); err != nil {
			t.Fatal(err)
		}
		names = append(names, pgarrow.TableName{Schema: "Odd", Name: fmt.Sprint("T", i)})
	}
	var numeric, moodOID uint32
	if err := setup.QueryRow(ctx, "SELECT 'numeric'::regtype::oid, 'mood'::regtype::oid").Scan(&numeric, &moodOID); err != nil {
		t.Fatal(err)
	}

	proxy := testenv.StartProxy(t, fmt.Sprintf("%s:%d", pg.Host, pg.Port))
	cfg, err := pgx.ParseConfig(proxy.DSN(dsn))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	before := proxy.RoundTrips()
	tabs, err := pgarrow.LoadTables(ctx, conn, names)
	if err != nil {
		t.Fatal(err)
	}
	if rt := proxy.RoundTrips() - before; rt != 1 {
		t.Errorf("LoadTables of %d tables took %d round trips, want 1", n, rt)
	}
	for i, tab := range tabs {
		one, err := pgarrow.LoadTableByName(ctx, setup, names[i])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(tab, one) {
			t.Errorf("table %d in a batch = %+v, alone = %+v", i, tab, one)
		}
	}
	c := tabs[7].Columns
	want := []struct {
		name, typ   string
		elem, base  uint32
		baseMod     int32
		enum, notNu bool
	}{
		{"id", "integer", 0, 0, -1, false, true},
		{"m", "mood", 0, 0, -1, true, false},
		{"ms", "mood[]", moodOID, 0, -1, true, false},
		{"d", "money3", 0, numeric, 10<<16 | 2 + 4, false, false},
		{"ds", "money3[]", numeric, 0, -1, false, false},
		{"v", "character varying(8)", 0, 0, -1, false, false},
		{"a", "integer[]", 23, 0, -1, false, false},
	}
	if len(c) != len(want) {
		t.Fatalf("columns = %+v", c)
	}
	for i, w := range want {
		if g := c[i]; g.Name != w.name || g.TypeName != w.typ || g.ElemOID != w.elem || g.BaseOID != w.base || g.BaseTypeMod != w.baseMod || g.IsEnum != w.enum || g.NotNull != w.notNu {
			t.Errorf("column %d = %+v, want %+v", i, g, w)
		}
	}

	// A Relation message gives names, type oids and modifiers only.
	cols := make([]pgarrow.Column, len(c))
	for i, x := range c {
		cols[i] = pgarrow.Column{Name: x.Name, TypeOID: x.TypeOID, TypeMod: x.TypeMod, NotNull: x.NotNull}
	}
	before = proxy.RoundTrips()
	if err := pgarrow.NewTypeResolver(conn).Resolve(ctx, cols); err != nil {
		t.Fatal(err)
	}
	if rt := proxy.RoundTrips() - before; rt != 1 {
		t.Errorf("Resolve took %d round trips, want 1", rt)
	}
	if !reflect.DeepEqual(cols, c) {
		t.Errorf("resolved %+v, want %+v", cols, c)
	}

	// A publication's tables, sorted, in one round trip.
	if _, err := setup.Exec(ctx, `CREATE PUBLICATION pub FOR TABLE "Odd"."T3", "Odd"."T12", "Odd"."T1"; CREATE PUBLICATION nothing`); err != nil {
		t.Fatal(err)
	}
	before = proxy.RoundTrips()
	pubTabs, err := pgarrow.LoadPublicationTables(ctx, conn, "pub")
	if err != nil {
		t.Fatal(err)
	}
	if rt := proxy.RoundTrips() - before; rt != 1 {
		t.Errorf("LoadPublicationTables took %d round trips, want 1", rt)
	}
	if len(pubTabs) != 3 || !reflect.DeepEqual(pubTabs, []*pgarrow.Table{tabs[1], tabs[12], tabs[3]}) {
		t.Errorf("publication tables = %+v, want T1, T12, T3", pubTabs)
	}
	for _, pub := range []string{"nothing", "nosuch"} {
		if got, err := pgarrow.LoadPublicationTables(ctx, conn, pub); err != nil || len(got) != 0 {
			t.Errorf("LoadPublicationTables(%s) = %v, %v; want none", pub, got, err)
		}
	}

	// The first table missing fails as loading it alone does.
	_, err = pgarrow.LoadTables(ctx, conn, append(names[:2:2], pgarrow.TableName{Schema: "Odd", Name: "t1"}, pgarrow.TableName{Name: "nope"}))
	_, alone := pgarrow.LoadTableByName(ctx, setup, pgarrow.TableName{Schema: "Odd", Name: "t1"})
	if err == nil || alone == nil || err.Error() != alone.Error() {
		t.Errorf("batch error %v, alone %v", err, alone)
	}
}
