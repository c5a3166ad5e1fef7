// Usage: node query-duckdb.mjs QUERIES.json
// Runs SQL queries with DuckDB (@duckdb/node-api: the DuckDB engine itself,
// an independent Parquet reader) and prints, for each, the column names,
// their DuckDB types and the rows. QUERIES.json is a JSON array of SQL
// strings; queries name Parquet files with read_parquet('...'). Values are
// printed as DuckDB's JSON form of them: cast to VARCHAR in the query to
// compare text exactly. Output: [{"names": [...], "types": [...],
// "rows": [[...], ...]}, ...].
import { readFileSync } from 'node:fs';
import { DuckDBInstance } from '@duckdb/node-api';

const queries = JSON.parse(readFileSync(process.argv[2], 'utf8'));
// No network: extensions are the ones built in (parquet, json, icu).
const db = await DuckDBInstance.create(':memory:', { autoinstall_known_extensions: 'false' });
const conn = await db.connect();
await conn.run("SET TimeZone = 'UTC'");
const out = [];
for (const q of queries) {
  let r;
  try {
    r = await conn.runAndReadAll(q);
  } catch (e) {
    process.stderr.write(`query-duckdb: ${q}\n${e.message}\n`);
    process.exit(1);
  }
  out.push({ names: r.columnNames(), types: r.columnTypes().map(String), rows: r.getRowsJson() });
}
process.stdout.write(JSON.stringify(out) + '\n');
