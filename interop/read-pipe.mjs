// Usage: node read-pipe.mjs FILE
// Reads an rtrctl pipe (Arrow IPC streams back to back) with Apache Arrow JS
// and prints {"streams": [Table, ...]} as JSON (see internal/interop.Table).
import { readFileSync } from 'node:fs';
import { RecordBatchReader } from 'apache-arrow';
import { describe } from './common.mjs';

const bytes = readFileSync(process.argv[2]);
const streams = [];
// readAll yields one reader per stream; each must be consumed before the next.
for (const reader of RecordBatchReader.readAll(bytes)) {
  const batches = [...reader];
  streams.push(describe(reader.schema, batches));
}
process.stdout.write(JSON.stringify({ streams }) + '\n');
