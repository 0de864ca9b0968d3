// A built-in source kind from code: the demo catalog in an SQLite file, read by sqliteSource.
// postgresSource, mysqlSource and httpSource are built the same way (docs/sources.md).
// Run: npm run build && VALKEY_URL=redis://127.0.0.1:6379 node examples/sqlite-source.mjs
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createStore, ensureDemoCatalog, sqliteSource } from 'echostore';

const file = join(mkdtempSync(join(tmpdir(), 'echostore-example-')), 'demo.sqlite');
ensureDemoCatalog(file); // 10,000 products
const source = sqliteSource({
  file,
  query: 'SELECT id, sku, name, price_cents FROM products WHERE id = ?',
});

const table = `catalog-${randomUUID().slice(0, 8)}`;
const store = await createStore({
  valkey: process.env.VALKEY_URL ?? 'redis://127.0.0.1:6379',
  // A source gives the table its load (and loadMany, for the SQL servers' batch queries).
  tables: { [table]: { load: source.load } },
});
const r = await store.table(table).get('42');
assert.equal(r.found && r.value.sku, 'SKU-000042');
console.log('get 42:', r.value);
await store.close();
await source.close();
console.log('ok');
