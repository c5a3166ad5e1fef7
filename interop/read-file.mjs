// Usage: node read-file.mjs FILE
// Reads an Arrow IPC file-format file (rtrctl store batch files) with Apache
// Arrow JS and prints one Table as JSON (see internal/interop.Table).
import { readFileSync } from 'node:fs';
import { RecordBatchReader } from 'apache-arrow';
import { describe } from './common.mjs';

const reader = RecordBatchReader.from(readFileSync(process.argv[2])).open({ autoDestroy: false });
if (!reader.isFile()) {
  process.stderr.write(`${process.argv[2]} is not an Arrow IPC file (no ARROW1 magic); for pipes use read-pipe.mjs\n`);
  process.exit(2);
}
const schema = reader.schema;
const batches = [...reader];
process.stdout.write(JSON.stringify(describe(schema, batches)) + '\n');
