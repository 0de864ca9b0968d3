import { describe, expect, it, vi } from 'vitest';
import { freePort } from '../harness/free-port.js';
import { serveApp } from './helpers/http.js';
import { openStore } from './helpers/probe.js';
import { spawnServer } from './helpers/server.js';
import { uniqueTable } from './helpers/store.js';

/** A store whose table answers `{ id, n }`, `n` counting the loads; `l1TtlMs` short so rows reload. */
async function storeOn(url: string) {
  const table = uniqueTable('etag');
  let n = 0;
  const store = await openStore(
    { [table]: { load: (id) => ({ id, n: ++n }), l1: { ttlMs: 1 } } },
    { valkey: { url, commandTimeoutMs: 300, connectTimeoutMs: 300 }, readyTimeoutMs: 300 },
  );
  const app = await serveApp(store);
  const get = (id: string, ifNoneMatch?: string) =>
    app.inject({
      method: 'GET',
      url: `/v1/tables/${table}/items/${id}`,
      headers: ifNoneMatch === undefined ? {} : { 'if-none-match': ifNoneMatch },
    });
  const put = (id: string, value: unknown) =>
    app.inject({ method: 'PUT', url: `/v1/tables/${table}/items/${id}`, payload: value as object });
  return { store, get, put };
}

describe('ETag identifies the content in every mode', () => {
  it('with Valkey unreachable: another id, or the same id with new content, never matches an old ETag', async () => {
    // Valkey on a port nothing listens on: the store runs degraded from the start.
    const { store, get } = await storeOn(`redis://127.0.0.1:${await freePort()}`);
    expect(store.valkeyReady()).toBe(false);
    const a = await get('a');
    expect(a.statusCode).toBe(200);
    const tag = a.headers.etag as string;
    expect(tag).toMatch(/^"[^"]+"$/);

    const other = await get('never-fetched', tag);
    expect(other.statusCode).toBe(200);
    expect(other.headers.etag).not.toBe(tag);

    // Once the row leaves L1 (l1.ttlMs 1 ms) it is loaded again with new content: the old tag
    // answers 304 only while the content is the one it names.
    await vi.waitFor(async () => {
      const again = await get('a', tag);
      expect(again.statusCode).toBe(200);
      expect(JSON.parse(again.body)).toMatchObject({ id: 'a' });
      expect(again.headers.etag).not.toBe(tag);
    });
  });

  it('with Valkey killed after a value was cached: rows loaded since do not share one ETag', async () => {
    const server = await spawnServer();
    try {
      const { store, get } = await storeOn(server.url);
      expect((await get('before')).statusCode).toBe(200);
      await server.stop();
      const x = await get('x');
      const y = await get('y', x.headers.etag as string);
      expect(store.valkeyReady()).toBe(false);
      expect(y.statusCode).toBe(200);
      expect(y.headers.etag).not.toBe(x.headers.etag);
    } finally {
      await server.stop();
    }
  });

  it('with Valkey up: a 200 and the 304 for its ETag, and a PUT answers the ETag a GET then sends', async () => {
    const server = await spawnServer();
    try {
      const { get, put } = await storeOn(server.url);
      const first = await get('p');
      expect((await get('p', first.headers.etag as string)).statusCode).toBe(304);
      const written = await put('p', { written: true });
      expect(written.statusCode).toBe(200);
      expect(written.headers.etag).not.toBe(first.headers.etag);
      const read = await get('p', written.headers.etag as string);
      expect(read.statusCode).toBe(304);
      expect(read.headers.etag).toBe(written.headers.etag);
    } finally {
      await server.stop();
    }
  });
});
