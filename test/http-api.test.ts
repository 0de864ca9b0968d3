// @module-tag cluster (a law test: npm run test:cluster runs it again on a local 3+3 cluster)
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { createStore, type Store } from '../src/index.js';
import { deferred, uniqueTable, valkeyCluster, valkeyTarget, valkeyUrl } from './helpers/store.js';

describe('HTTP API', () => {
  let store: Store;
  let app: FastifyInstance;
  const products = uniqueTable('products');
  const broken = uniqueTable('broken');
  const slow = uniqueTable('slow');
  const hung = uniqueTable('hung');
  const strict = uniqueTable('strict');
  const slowGate = deferred<void>();
  let productLoads = 0;

  beforeAll(async () => {
    store = await createStore({
      valkey: valkeyTarget(),
      tables: {
        [products]: {
          load: (id) => {
            productLoads++;
            if (id === 'missing') return undefined;
            if (id === 'bigint') return { n: 1n };
            return { id, name: `product ${id}` };
          },
        },
        [broken]: {
          load: () => Promise.reject(new Error('database is on fire')),
        },
        [slow]: {
          loadTimeoutMs: 200,
          leaseMs: 400,
          maxConcurrentLoads: 1,
          maxQueuedLoads: 0,
          load: async (id) => {
            await slowGate.promise;
            return { id };
          },
        },
        // A loader that never settles keeps its admission slot for good (a bulkhead): its own table.
        [hung]: { loadTimeoutMs: 200, leaseMs: 400, load: () => new Promise(() => {}) },
        [strict]: { idPattern: '^[0-9]+$', load: (id) => ({ id }) },
      },
    });
    app = buildServer({ store, logger: pino({ level: 'silent' }), bodyLimitBytes: 1024 });
    await app.ready();
  });
  afterAll(async () => {
    slowGate.resolve();
    await app.close();
    await store.close();
  });

  const item = (table: string, id: string) => `/v1/tables/${table}/items/${id}`;

  it('answers a cold read from the source, then from L1, with Cache-Status', async () => {
    const first = await app.inject(item(products, 'a1'));
    expect(first.statusCode).toBe(200);
    expect(first.json()).toEqual({ id: 'a1', name: 'product a1' });
    expect(first.headers['content-type']).toMatch(/^application\/json/);
    expect(first.headers['cache-status']).toMatch(
      /^echostore; fwd=miss; fwd-status=200; stored; ttl=\d+$/,
    );
    const second = await app.inject(item(products, 'a1'));
    expect(second.statusCode).toBe(200);
    expect(second.body).toBe(first.body);
    expect(second.headers['cache-status']).toMatch(/^echostore; hit; ttl=\d+; detail=l1$/);
    expect(second.headers.etag).toBe(first.headers.etag);
    const conditional = await app.inject({
      url: item(products, 'a1'),
      headers: { 'if-none-match': String(first.headers.etag) },
    });
    expect(conditional.statusCode).toBe(304);
    for (const header of [`W/${first.headers.etag}`, `"1", ${first.headers.etag}`, '*']) {
      const r = await app.inject({
        url: item(products, 'a1'),
        headers: { 'if-none-match': header },
      });
      expect(r.statusCode, header).toBe(304);
    }
    const other = await app.inject({
      url: item(products, 'a1'),
      headers: { 'if-none-match': '"1"' },
    });
    expect(other.statusCode).toBe(200);
    expect(conditional.body).toBe('');
    const head = await app.inject({ method: 'HEAD', url: item(products, 'a1') });
    expect(head.statusCode).toBe(200);
    expect(head.body).toBe('');
  });

  it('marks coalesced requests as collapsed', async () => {
    const before = productLoads;
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => app.inject(item(products, 'burst'))),
    );
    expect(productLoads - before).toBe(1);
    const collapsed = answers.filter((r) =>
      r.headers['cache-status']?.toString().endsWith('; collapsed'),
    );
    expect(collapsed).toHaveLength(19);
    expect(new Set(answers.map((r) => r.body)).size).toBe(1);
  });

  it('answers 404 ECC_NOT_FOUND for an item the source does not have, negative-cached', async () => {
    const first = await app.inject(item(products, 'missing'));
    expect(first.statusCode).toBe(404);
    expect(first.json().error.code).toBe('ECC_NOT_FOUND');
    expect(first.headers['cache-status']).toMatch(/fwd-status=404/);
    const second = await app.inject(item(products, 'missing'));
    expect(second.statusCode).toBe(404);
    expect(second.headers['cache-status']).toMatch(/detail=l1-negative$/);
  });

  it('answers 404 ECC_UNKNOWN_TABLE for a table that is not configured or malformed', async () => {
    for (const table of ['nope', 'UPPER', 'a:b']) {
      const r = await app.inject(item(table, '1'));
      expect(r.statusCode).toBe(404);
      expect(r.json().error.code).toBe('ECC_UNKNOWN_TABLE');
    }
  });

  it('answers 400 ECC_BAD_ID for ids that are too long, have control characters, or break idPattern', async () => {
    const cases = [
      item(products, 'x'.repeat(513)),
      item(products, encodeURIComponent('€'.repeat(171))),
      item(products, '%01'),
      item(products, 'a%7Fb'),
      item(strict, 'abc'),
    ];
    for (const url of cases) {
      const r = await app.inject(url);
      expect(r.statusCode, url).toBe(400);
      expect(r.json().error.code, url).toBe('ECC_BAD_ID');
    }
    const ok = await app.inject(item(products, 'x'.repeat(512)));
    expect(ok.statusCode).toBe(200);
  });

  it('answers 400 ECC_BAD_ID for invalid percent-encoding, never 5xx', async () => {
    const r = await app.inject(item(products, '%E0%A4%A'));
    expect(r.statusCode).toBe(400);
    expect(r.json().error.code).toBe('ECC_BAD_ID');
  });

  it('answers 404 ECC_ROUTE_NOT_FOUND for unknown routes and 405 for wrong methods', async () => {
    const unknown = await app.inject('/nowhere');
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error.code).toBe('ECC_ROUTE_NOT_FOUND');
    for (const method of ['POST', 'PATCH', 'TRACE'] as const) {
      const r = await app.inject({ method, url: item(products, '1') });
      expect(r.statusCode, method).toBe(405);
      expect(r.json().error.code).toBe('ECC_METHOD_NOT_ALLOWED');
      expect(r.headers.allow).toBe('GET, HEAD, PUT, DELETE, OPTIONS');
    }
  });

  it('answers OPTIONS on an item with 204 and Allow', async () => {
    const r = await app.inject({ method: 'OPTIONS', url: item(products, '1') });
    expect(r.statusCode).toBe(204);
    expect(r.headers.allow).toBe('GET, HEAD, PUT, DELETE, OPTIONS');
    expect(r.body).toBe('');
  });

  it('answers 502 ECC_LOAD_FAILED when the loader fails and 502 ECC_BAD_VALUE for an unstorable value', async () => {
    const failed = await app.inject(item(broken, '1'));
    expect(failed.statusCode).toBe(502);
    expect(failed.json().error.code).toBe('ECC_LOAD_FAILED');
    const bad = await app.inject(item(products, 'bigint'));
    expect(bad.statusCode).toBe(502);
    expect(bad.json().error.code).toBe('ECC_BAD_VALUE');
  });

  it('answers 504 ECC_LOAD_TIMEOUT when the load outlives loadTimeoutMs', async () => {
    const r = await app.inject(item(hung, 'hang'));
    expect(r.statusCode).toBe(504);
    expect(r.json().error.code).toBe('ECC_LOAD_TIMEOUT');
  });

  it('answers 503 ECC_SHED with Retry-After beyond maxConcurrentLoads', async () => {
    const first = app.inject(item(slow, 'one'));
    await vi.waitFor(() => expect(store.table(slow).stats().loads_active).toBe(1));
    const shed = await app.inject(item(slow, 'two'));
    expect(shed.statusCode).toBe(503);
    expect(shed.json().error.code).toBe('ECC_SHED');
    expect(Number(shed.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    slowGate.resolve();
    expect((await first).statusCode).toBe(200);
  });

  it('PUT writes through (version, then served from L1) and DELETE invalidates', async () => {
    const put = await app.inject({
      method: 'PUT',
      url: item(products, 'w1'),
      payload: { price: 5 },
    });
    expect(put.statusCode).toBe(200);
    const { version } = put.json();
    expect(typeof version).toBe('number');
    const read = await app.inject(item(products, 'w1'));
    expect(read.json()).toEqual({ price: 5 });
    expect(read.headers['cache-status']).toMatch(/detail=l1$/);
    expect(read.headers.etag).toBe(put.headers.etag);
    const del = await app.inject({ method: 'DELETE', url: item(products, 'w1') });
    expect(del.statusCode).toBe(204);
    const after = await app.inject(item(products, 'w1'));
    expect(after.json()).toEqual({ id: 'w1', name: 'product w1' });
    expect(after.headers['cache-status']).toMatch(/fwd=miss/);
  });

  it('rejects bad PUT bodies with coded client errors', async () => {
    const url = item(products, 'w2');
    const invalid = await app.inject({
      method: 'PUT',
      url,
      payload: '{nope',
      headers: { 'content-type': 'application/json' },
    });
    expect(invalid.statusCode).toBe(400);
    expect(invalid.json().error.code).toBe('ECC_BAD_REQUEST');
    const empty = await app.inject({ method: 'PUT', url });
    expect(empty.statusCode).toBe(400);
    expect(empty.json().error.code).toBe('ECC_BAD_REQUEST');
    const text = await app.inject({
      method: 'PUT',
      url,
      payload: 'hi',
      headers: { 'content-type': 'text/plain' },
    });
    expect(text.statusCode).toBe(415);
    expect(text.json().error.code).toBe('ECC_UNSUPPORTED_MEDIA_TYPE');
    const big = await app.inject({ method: 'PUT', url, payload: { s: 'x'.repeat(2000) } });
    expect(big.statusCode).toBe(413);
    expect(big.json().error.code).toBe('ECC_PAYLOAD_TOO_LARGE');
    // http.bodyLimitBytes caps every JSON body, not only a PUT's (docs/http-api.md).
    const bigIds = { ids: Array.from({ length: 200 }, (_, i) => `id${i}`) };
    for (const [path, payload] of [
      ['items:batchGet', bigIds],
      ['warm', bigIds],
      ['purge', { tags: Array.from({ length: 200 }, (_, i) => `tag${i}`) }],
    ] as const) {
      const r = await app.inject({
        method: 'POST',
        url: `/v1/tables/${products}/${path}`,
        payload,
      });
      expect(r.statusCode, path).toBe(413);
      expect(r.json().error.code, path).toBe('ECC_PAYLOAD_TOO_LARGE');
    }
    const badId = await app.inject({
      method: 'PUT',
      url: item(products, '%01'),
      payload: { a: 1 },
    });
    expect(badId.statusCode).toBe(400);
    expect(badId.json().error.code).toBe('ECC_BAD_ID');
    const latin1 = await app.inject({
      method: 'PUT',
      url,
      payload: '{"a":1}',
      headers: { 'content-type': 'application/json; charset=iso-8859-1' },
    });
    expect(latin1.statusCode).toBe(415);
    expect(latin1.json().error.code).toBe('ECC_UNSUPPORTED_MEDIA_TYPE');
    // Bytes that are not UTF-8 are refused, never stored as U+FFFD.
    const notUtf8 = await app.inject({
      method: 'PUT',
      url,
      payload: Buffer.from([0x22, 0xc3, 0x28, 0x22]),
      headers: { 'content-type': 'application/json' },
    });
    expect(notUtf8.statusCode).toBe(400);
    expect(notUtf8.json().error.code).toBe('ECC_BAD_REQUEST');
    const unknown = await app.inject({ method: 'DELETE', url: item('nope', '1') });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error.code).toBe('ECC_UNKNOWN_TABLE');
  });

  it('lists tables with their policy and stats', async () => {
    const r = await app.inject('/v1/tables');
    expect(r.statusCode).toBe(200);
    const table = r.json().tables.find((t: { name: string }) => t.name === products);
    expect(table.policy.ttlMs).toBe(300_000);
    expect(table.stats.loads).toBeGreaterThan(0);
    expect(table.stats).toHaveProperty('coalesced');
    expect(r.json().tables.find((t: { name: string }) => t.name === strict).policy.idPattern).toBe(
      '^[0-9]+$',
    );
  });

  it('reports liveness and readiness', async () => {
    const live = await app.inject('/healthz');
    expect(live.statusCode).toBe(200);
    const ready = await app.inject('/readyz');
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({
      status: 'ready',
      valkey: 'ready',
      details: {
        coherence: true,
        subscriber: 'ready',
        maxmemoryPolicy: expect.any(String),
        evictionRisk: null,
        topology:
          valkeyCluster() === undefined
            ? { mode: 'standalone', nodes: [new URL(valkeyUrl()).host] }
            : { mode: 'cluster', nodes: expect.arrayContaining([expect.any(String)]) },
      },
    });
  });
});
