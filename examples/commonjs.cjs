// EchoStore from CommonJS. The package is an ES module: a dynamic import() loads it from any
// CommonJS file. (Node 20.19+ can also require() it, but `import` statements and top-level
// await, as in the ESM examples, are not allowed in a CommonJS file: wrap them in a function.)
// Run: npm run build && VALKEY_URL=redis://127.0.0.1:6379 node examples/commonjs.cjs
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');

async function main() {
  const { createStore } = await import('echostore');
  const table = `users-${randomUUID().slice(0, 8)}`;
  const store = await createStore({
    valkey: process.env.VALKEY_URL ?? 'redis://127.0.0.1:6379',
    tables: { [table]: { load: async (id) => ({ id, name: `user ${id}` }) } },
  });
  const r = await store.table(table).get('1');
  assert.equal(r.found, true);
  console.log('get 1:', r.value, `from ${r.layer}`);
  await store.close();
  console.log('ok');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
