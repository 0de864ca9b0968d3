/** The source contract (test/helpers/source-contract.ts) run against every source kind. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { onTestFinished } from 'vitest';
import { httpSource, type Source, sqliteSource } from '../src/sources/index.js';
import { describeSource } from './helpers/source-contract.js';
import { itemsDb, openDescriptors } from './helpers/sqlite-fixture.js';
import { deferred } from './helpers/store.js';

describeSource('sqlite', () => {
  const file = itemsDb();
  return {
    // json(doc) fails at load time for 'b', whose doc is not JSON.
    source: sqliteSource({
      file,
      query: 'SELECT id, label, n, json(doc) AS doc FROM items WHERE id = ?',
    }),
    found: { id: 'a', value: { id: 'a', label: 'first', n: 1, doc: '{"ok":true}' } },
    missing: 'zzz',
    failing: 'b',
    openHandles: () => openDescriptors(file),
  };
});

describeSource('http', async () => {
  const slowStarted = deferred<void>();
  const origin = createServer((req, res) => {
    const id = req.url?.split('/').at(-1);
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (id === 'slow') {
      slowStarted.resolve();
      return; // never answers
    }
    if (id === 'missing') return json(404, { error: 'no such item' });
    if (id === 'failing') return json(500, { error: 'boom' });
    json(200, { id, name: 'found' });
  });
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  onTestFinished(async () => {
    origin.closeAllConnections();
    await new Promise((resolve) => origin.close(resolve));
  });
  const { port } = origin.address() as AddressInfo;
  return {
    source: httpSource({ url: `http://127.0.0.1:${port}/items/{id}` }),
    found: { id: '42', value: { id: '42', name: 'found' } },
    missing: 'missing',
    failing: 'failing',
    slow: { id: 'slow', started: () => slowStarted.promise },
    // Connections the origin still has open with this source.
    openHandles: () =>
      new Promise<number>((resolve, reject) =>
        origin.getConnections((err, n) => (err ? reject(err) : resolve(n))),
      ),
  };
});

describeSource('function', () => {
  // A plain loader, as a library user writes one: a slow call that honours the signal.
  const pending = new Set<(reason: unknown) => void>();
  const slowStarted = deferred<void>();
  const rows = new Map<string, unknown>([['7', { id: '7', from: 'function' }]]);
  const source: Source = {
    async load(id, { signal }) {
      signal.throwIfAborted();
      if (id === 'failing') throw new Error('source down');
      if (id !== 'slow') return rows.get(id);
      return new Promise((_, reject) => {
        const fail = (reason: unknown) => {
          pending.delete(fail);
          reject(reason);
        };
        pending.add(fail);
        signal.addEventListener('abort', () => fail(signal.reason), { once: true });
        slowStarted.resolve();
      });
    },
    close() {
      for (const fail of pending) fail(new Error('source closed'));
    },
  };
  return {
    source,
    found: { id: '7', value: { id: '7', from: 'function' } },
    missing: 'nobody',
    failing: 'failing',
    slow: { id: 'slow', started: () => slowStarted.promise },
    openHandles: () => pending.size,
  };
});
