// EchoStore as a library, in an ES module (the package is ESM: "type": "module").
// Run: npm run build && VALKEY_URL=redis://127.0.0.1:6379 node examples/library.mjs
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createStore, withPolicy } from 'echostore';

// Your source of truth; here a Map, counting its reads.
const db = new Map([['42', { id: 42, name: 'Compact Mug' }]]);
let reads = 0;

// A fresh table name, so that a rerun starts cold (Valkey keeps what the last run cached).
const table = `products-${randomUUID().slice(0, 8)}`;
const store = await createStore({
  valkey: process.env.VALKEY_URL ?? 'redis://127.0.0.1:6379',
  tables: {
    [table]: {
      ttlMs: 60_000,
      load: async (id) => {
        reads++;
        const row = db.get(id);
        // undefined is "not found" (negative-cached); withPolicy sets one row's TTL.
        return row === undefined ? withPolicy(undefined, { ttlMs: 5_000 }) : row;
      },
    },
  },
});
const products = store.table(table);

// A miss loads from the source; the next read is an L1 hit.
const first = await products.get('42');
assert.equal(first.layer, 'origin');
assert.equal((await products.get('42')).layer, 'l1');
console.log('get 42:', first.value, `(${reads} source read)`);

// put writes the cache (Valkey, then L1), never the source.
const { version } = await products.put('42', { id: 42, name: 'Compact Mug', price_cents: 990 });
const written = await products.get('42');
assert.equal(written.version, version);
console.log('after put:', written.value);

// invalidate deletes it from the cache: the next read goes to the source again.
await products.invalidate('42');
assert.equal((await products.get('42')).layer, 'origin');
assert.equal(reads, 2);

// getMany: each distinct id once, in order; a missing id is found: false.
const many = await products.getMany(['42', '7']);
console.log(
  'getMany:',
  many.map((e) => (e.ok ? `${e.id}: ${e.result.found ? 'found' : 'not found'}` : e.error.code)),
);

// Every read above is counted in the store's own metrics registry.
assert.match(await store.registry.metrics(), /echostore_reads_total/);

await store.close();
console.log('ok');
