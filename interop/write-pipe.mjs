// Usage: node write-pipe.mjs FILE
// Writes an rtrctl pipe with Apache Arrow JS: a data stream of collection
// js.items (domain lsn: id int64, name utf8, price float64, _time, _diff)
// followed by a progress stream. TestNodeInterop checks the exact values.
import { writeFileSync } from 'node:fs';
import {
  Field, Float64, Int64, RecordBatch, RecordBatchStreamWriter, Schema, Struct, Uint64, Utf8,
  makeData, vectorFromArray,
} from 'apache-arrow';


// writeStream encodes one Arrow IPC stream: schema, one batch, end marker.
function writeStream(schema, columns) {
  const children = schema.fields.map((f) => columns[f.name].data[0]);
  const length = children[0].length;
  const batch = new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length, children, nullCount: 0 }));
  return RecordBatchStreamWriter.writeAll([batch]).toUint8Array(true);
}

const dataSchema = new Schema(
  [
    new Field('id', new Int64(), false),
    new Field('name', new Utf8(), true),
    new Field('price', new Float64(), true),
    new Field('_time', new Uint64(), false),
    new Field('_diff', new Int64(), false),
  ],
  new Map([
    ['rtr.version', '1'],
    ['rtr.kind', 'data'],
    ['rtr.collection', 'js.items'],
    ['rtr.source', 'node'],
    ['rtr.time', 'lsn'],
    ['rtr.key', 'id'],
  ]),
);
const data = writeStream(dataSchema, {
  id: vectorFromArray([1n, -2n, 9007199254740993n], new Int64()),
  name: vectorFromArray(['apple', null, 'ünïcode ✓'], new Utf8()),
  price: vectorFromArray([1.5, 0.1, null], new Float64()),
  _time: vectorFromArray([0n, 23803720n, 18446744073709551615n], new Uint64()),
  _diff: vectorFromArray([1n, -1n, 1n], new Int64()),
});

const progressSchema = new Schema(
  [new Field('_partition', new Utf8(), false), new Field('_upper', new Uint64(), false)],
  new Map([
    ['rtr.version', '1'],
    ['rtr.kind', 'progress'],
    ['rtr.collection', 'js.items'],
    ['rtr.time', 'lsn'],
  ]),
);
const progress = writeStream(progressSchema, {
  _partition: vectorFromArray([''], new Utf8()),
  _upper: vectorFromArray([23803721n], new Uint64()),
});

const out = new Uint8Array(data.length + progress.length);
out.set(data, 0);
out.set(progress, data.length);
writeFileSync(process.argv[2], out);
