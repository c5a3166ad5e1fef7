// Shared helpers of the interop scripts: turn Arrow JS schemas and batches
// into plain JSON that the Go tests compare (see internal/interop.Table).

/** jsonValue converts one Arrow JS value to JSON-safe data. */
export function jsonValue(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return v.toString(); // int64/uint64
  if (v instanceof Uint8Array) return Buffer.from(v).toString('hex'); // binary
  if (v instanceof Date) return v.getTime();
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  if (ArrayBuffer.isView(v)) return Array.from(v, jsonValue);
  if (Array.isArray(v)) return v.map(jsonValue);
  if (typeof v === 'object') {
    if (typeof v.toArray === 'function') return Array.from(v.toArray(), jsonValue); // list vectors
    if (typeof v.toJSON === 'function') {
      const o = v.toJSON();
      if (o instanceof Map) return Object.fromEntries([...o].map(([k, x]) => [String(k), jsonValue(x)]));
      const out = {};
      for (const [k, x] of Object.entries(o)) out[k] = jsonValue(x);
      return out;
    }
  }
  return v;
}

/** describe prints a schema and its batches as an interop Table. */
export function describe(schema, batches) {
  const metadata = Object.fromEntries(schema.metadata);
  const fields = schema.fields.map((f) => ({ name: f.name, type: String(f.type), nullable: f.nullable }));
  const columns = {};
  let rows = 0;
  for (const f of schema.fields) columns[f.name] = [];
  for (const batch of batches) {
    rows += batch.numRows;
    schema.fields.forEach((f, i) => {
      const vec = batch.getChildAt(i);
      for (let r = 0; r < batch.numRows; r++) columns[f.name].push(jsonValue(vec.get(r)));
    });
  }
  return { metadata, fields, batches: batches.length, rows, columns };
}
