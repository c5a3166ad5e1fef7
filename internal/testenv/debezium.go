package testenv

import (
	"encoding/json"
	"fmt"
	"slices"
)

// DebeziumTable writes change events of one table as the Debezium
// PostgreSQL or MySQL connector does, through Kafka Connect's
// JsonConverter with schemas.enable=true: a key {"schema", "payload"} of
// the primary key's fields and a value {"schema", "payload"} whose payload
// has before, after, source, op, ts_ms and transaction, field for field
// as the connectors' documentation shows them
// (debezium.io/documentation/reference/stable/connectors/postgresql.html
// and mysql.html, "Data change events"). It is independent of rtrctl's
// decoders: it only builds JSON.
type DebeziumTable struct {
	// Connector is "postgresql" or "mysql".
	Connector string
	// Server is the topic prefix (PostgreSQL_server, mysql-server-1).
	Server string
	// DB, Schema (PostgreSQL only) and Table name the table.
	DB, Schema, Table string
	// Columns are the table's columns: name and Connect schema (type,
	// optional, and name/parameters for logical types).
	Columns []DebeziumColumn
	// Key names the primary key's columns.
	Key []string
}

// DebeziumColumn is a column and its Connect schema.
type DebeziumColumn struct {
	Name   string
	Schema map[string]any
}

// Row is a row's payload: column name -> the value as JsonConverter
// writes it (numbers, strings, base64 strings for bytes, nil).
type Row map[string]any

func (t *DebeziumTable) prefix() string {
	if t.Connector == "postgresql" {
		return t.Server + "." + t.Schema + "." + t.Table
	}
	return t.Server + "." + t.DB + "." + t.Table
}

func (t *DebeziumTable) fields(names []string) []any {
	var out []any
	for _, c := range t.Columns {
		if names != nil && !slices.Contains(names, c.Name) {
			continue
		}
		f := map[string]any{"field": c.Name}
		for k, v := range c.Schema {
			f[k] = v
		}
		out = append(out, f)
	}
	return out
}

// KeyOf returns the record key of row: its primary key's fields.
func (t *DebeziumTable) KeyOf(row Row) []byte {
	payload := map[string]any{}
	for _, k := range t.Key {
		payload[k] = row[k]
	}
	return mustJSON(map[string]any{
		"schema":  map[string]any{"type": "struct", "fields": t.fields(t.Key), "optional": false, "name": t.prefix() + ".Key"},
		"payload": payload,
	})
}

func (t *DebeziumTable) sourceSchema() map[string]any {
	f := func(typ, name string, optional bool, extra ...any) map[string]any {
		m := map[string]any{"type": typ, "optional": optional, "field": name}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	common := []any{f("string", "version", false), f("string", "connector", false), f("string", "name", false),
		f("int64", "ts_ms", false),
		f("string", "snapshot", true, "name", "io.debezium.data.Enum", "version", 1,
			"parameters", map[string]any{"allowed": "true,last,false,incremental"}, "default", "false"),
		f("string", "db", false), f("string", "sequence", true)}
	if t.Connector == "postgresql" {
		return map[string]any{"type": "struct", "fields": append(common, f("string", "schema", false), f("string", "table", false),
			f("int64", "txId", true), f("int64", "lsn", true), f("int64", "xmin", true)),
			"optional": false, "name": "io.debezium.connector.postgresql.Source", "field": "source"}
	}
	return map[string]any{"type": "struct", "fields": append(common, f("string", "table", true), f("int64", "server_id", false),
		f("string", "gtid", true), f("string", "file", false), f("int64", "pos", false), f("int32", "row", false),
		f("int64", "thread", true), f("string", "query", true)),
		"optional": false, "name": "io.debezium.connector.mysql.Source", "field": "source"}
}

func (t *DebeziumTable) source(op string, pos int64, tsMs int64) map[string]any {
	snapshot := "false"
	if op == "r" {
		snapshot = "true"
	}
	if t.Connector == "postgresql" {
		return map[string]any{"version": "2.5.4.Final", "connector": "postgresql", "name": t.Server, "ts_ms": tsMs,
			"snapshot": snapshot, "db": t.DB, "sequence": fmt.Sprintf(`["%d","%d"]`, 24023119+pos, 24023128+pos),
			"schema": t.Schema, "table": t.Table, "txId": 555 + pos, "lsn": 24023128 + pos, "xmin": nil}
	}
	return map[string]any{"version": "2.5.4.Final", "connector": "mysql", "name": t.Server, "ts_ms": tsMs,
		"snapshot": snapshot, "db": t.DB, "sequence": nil, "table": t.Table, "server_id": 223344, "gtid": nil,
		"file": "mysql-bin.000003", "pos": 154 + 200*pos, "row": 0, "thread": 7, "query": nil}
}

// Event returns the value of a change event: op c, r, u or d, the row
// before (nil for none: creates, reads, PostgreSQL updates under REPLICA
// IDENTITY DEFAULT) and after (nil for deletes); pos numbers the event
// (its LSN, binlog position); tsMs is its ts_ms.
func (t *DebeziumTable) Event(op string, before, after Row, pos, tsMs int64) []byte {
	payload := map[string]any{"before": rowOrNil(before), "after": rowOrNil(after), "source": t.source(op, pos, tsMs),
		"op": op, "ts_ms": tsMs + 2, "transaction": nil}
	return mustJSON(map[string]any{"schema": t.envelopeSchema(), "payload": payload})
}

// envelopeSchema is the Connect schema of t's change events.
func (t *DebeziumTable) envelopeSchema() map[string]any {
	row := map[string]any{"type": "struct", "fields": t.fields(nil), "optional": true, "name": t.prefix() + ".Value"}
	beforeS, afterS := clone(row), clone(row)
	beforeS["field"], afterS["field"] = "before", "after"
	txn := map[string]any{"type": "struct", "fields": []any{
		map[string]any{"type": "string", "optional": false, "field": "id"},
		map[string]any{"type": "int64", "optional": false, "field": "total_order"},
		map[string]any{"type": "int64", "optional": false, "field": "data_collection_order"}},
		"optional": true, "name": "event.block", "version": 1, "field": "transaction"}
	schema := map[string]any{"type": "struct", "fields": []any{beforeS, afterS, t.sourceSchema(),
		map[string]any{"type": "string", "optional": false, "field": "op"},
		map[string]any{"type": "int64", "optional": true, "field": "ts_ms"}, txn},
		"optional": false, "name": t.prefix() + ".Envelope", "version": 1}
	return schema
}

// Truncate returns the value of a truncate event (op t; its record has a
// null key): the payload has only source, op and ts_ms.
func (t *DebeziumTable) Truncate(pos, tsMs int64) []byte {
	schema := map[string]any{"type": "struct", "fields": []any{t.sourceSchema(),
		map[string]any{"type": "string", "optional": false, "field": "op"},
		map[string]any{"type": "int64", "optional": true, "field": "ts_ms"}},
		"optional": false, "name": t.prefix() + ".Envelope"}
	return mustJSON(map[string]any{"schema": schema, "payload": map[string]any{"source": t.source("t", pos, tsMs), "op": "t", "ts_ms": tsMs + 2}})
}

func rowOrNil(r Row) any {
	if r == nil {
		return nil
	}
	return map[string]any(r)
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// DebeziumCustomers is the customers table of the Debezium documentation's
// examples (id int32 primary key, first_name, last_name, email), in the
// shape of connector ("postgresql" or "mysql").
func DebeziumCustomers(connector string) *DebeziumTable {
	t := &DebeziumTable{Connector: connector, Table: "customers", Key: []string{"id"},
		Columns: []DebeziumColumn{
			{Name: "id", Schema: map[string]any{"type": "int32", "optional": false}},
			{Name: "first_name", Schema: map[string]any{"type": "string", "optional": false}},
			{Name: "last_name", Schema: map[string]any{"type": "string", "optional": false}},
			{Name: "email", Schema: map[string]any{"type": "string", "optional": false}},
		}}
	if connector == "postgresql" {
		t.Server, t.DB, t.Schema = "PostgreSQL_server", "postgres", "public"
	} else {
		t.Server, t.DB = "mysql-server-1", "inventory"
	}
	return t
}
