import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { createStore, type Store } from '../src/index.js';
import { type RawAnswer, rawExchange } from './helpers/http.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

/**
 * `Cache-Control` and `Age` over real sockets (RFC 9111, RFC 5861). The
 * store's clock is the test's, so an answer's age is set, not waited for;
 * jitter is 0, so the soft TTL is exactly `ttlMs`.
 */
describe('HTTP caching headers', () => {
  const table = uniqueTable('cc');
  const off = uniqueTable('cc-off');
  let now = 1_000_000;
  let loads = 0;
  let store: Store;
  let app: FastifyInstance;
  let port: number;

  beforeAll(async () => {
    const policy = {
      ttlMs: 60_000,
      staleMs: 30_000,
      negativeTtlMs: 10_000,
      jitter: 0,
      earlyRefreshBeta: 0,
      l1: { ttlMs: 600_000 },
    };
    const load = (id: string) => {
      loads++;
      return id.startsWith('missing') ? undefined : { id };
    };
    store = await createStore({
      valkey: valkeyUrl(),
      now: () => now,
      tables: { [table]: { ...policy, load }, [off]: { ...policy, cacheHeaders: false, load } },
    });
    app = buildServer({ store, logger: pino({ level: 'silent' }) });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await app.close();
    await store.close();
  });

  const get = (path: string, extra = ''): Promise<RawAnswer> =>
    rawExchange(port, `GET ${path} HTTP/1.1\r\nHost: test\r\n${extra}Connection: close\r\n\r\n`);

  it('gives a fresh load its whole soft TTL at age 0, and the stale window of the policy', async () => {
    const r = await get(`/v1/tables/${table}/items/fresh`);
    expect(r.status).toBe(200);
    expect(r.headers['cache-control']).toBe(
      'max-age=60, stale-while-revalidate=30, stale-if-error=30',
    );
    expect(r.headers.age).toBe('0');
  });

  it('ages a cached answer so that max-age minus Age is the soft TTL left', async () => {
    await get(`/v1/tables/${table}/items/aging`);
    now += 25_000;
    const r = await get(`/v1/tables/${table}/items/aging`);
    expect(r.headers['cache-status']).toMatch(/detail=l1$/);
    expect(r.headers.age).toBe('25');
    expect(r.headers['cache-control']).toMatch(/^max-age=60,/);
    const maxAge = Number(/max-age=(\d+)/.exec(r.headers['cache-control'] as string)?.[1]);
    expect(maxAge - Number(r.headers.age)).toBe(35); // Cache-Status says ttl=35 too
    expect(r.headers['cache-status']).toContain('ttl=35');
  });

  it('says a stale answer is stale: its Age is past max-age, within stale-while-revalidate', async () => {
    await get(`/v1/tables/${table}/items/stale`);
    const before = loads;
    now += 70_000;
    const r = await get(`/v1/tables/${table}/items/stale`);
    expect(r.status).toBe(200);
    expect(r.headers['cache-status']).toMatch(/detail=l1-stale$/);
    expect(r.headers.age).toBe('70');
    expect(r.headers['cache-control']).toBe(
      'max-age=60, stale-while-revalidate=30, stale-if-error=30',
    );
    // The stale hit started one background refresh, counted at the source.
    await expect.poll(() => loads).toBe(before + 1);
  });

  it('keeps max-age − Age equal to Cache-Status ttl for a stale answer between two seconds', async () => {
    await get(`/v1/tables/${table}/items/stale-fraction`);
    now += 62_500; // 2.5 s past the 60 s soft TTL
    const r = await get(`/v1/tables/${table}/items/stale-fraction`);
    expect(r.headers['cache-status']).toMatch(/ttl=-2; detail=l1-stale$/);
    const maxAge = Number(/max-age=(\d+)/.exec(r.headers['cache-control'] as string)?.[1]);
    expect(maxAge - Number(r.headers.age)).toBe(-2);
  });

  it('gives a cached "not found" the negative TTL and no stale directives', async () => {
    const first = await get(`/v1/tables/${table}/items/missing-1`);
    expect(first.status).toBe(404);
    expect(first.headers['cache-control']).toBe('max-age=10');
    expect(first.headers.age).toBe('0');
    now += 4_000;
    const again = await get(`/v1/tables/${table}/items/missing-1`);
    expect(again.headers['cache-status']).toMatch(/detail=l1-negative$/);
    expect(again.headers['cache-control']).toBe('max-age=10');
    expect(again.headers.age).toBe('4');
  });

  it('sends the same headers with a 304', async () => {
    const first = await get(`/v1/tables/${table}/items/etag`);
    now += 3_000;
    const r = await get(
      `/v1/tables/${table}/items/etag`,
      `If-None-Match: ${first.headers.etag}\r\n`,
    );
    expect(r.status).toBe(304);
    expect(r.headers.age).toBe('3');
    expect(r.headers['cache-control']).toMatch(/^max-age=60, stale-while-revalidate=30/);
  });

  it('sends neither header for a table with cacheHeaders: false', async () => {
    for (const id of ['x', 'x', 'missing-x']) {
      const r = await get(`/v1/tables/${off}/items/${id}`);
      expect(r.headers['cache-status']).toBeDefined();
      expect(r.headers).not.toHaveProperty('cache-control');
      expect(r.headers).not.toHaveProperty('age');
    }
  });

  it('sends neither header with an error', async () => {
    const r = await get(`/v1/tables/${table}/items/%E2%80%AE`);
    expect(r.status).toBe(400);
    expect(r.headers).not.toHaveProperty('cache-control');
    expect(r.headers).not.toHaveProperty('age');
  });
});
