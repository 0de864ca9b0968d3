import { describe, expect, it } from 'vitest';
import { WARM_CONCURRENCY } from '../src/http/warm.js';
import { serveApp } from './helpers/http.js';
import { openStore } from './helpers/probe.js';
import { delay, uniqueTable } from './helpers/store.js';

const warmRequest = (table: string, ids: unknown[], headers: Record<string, string> = {}) => ({
  method: 'POST' as const,
  url: `/v1/tables/${table}/warm`,
  headers: { 'content-type': 'application/json', ...headers },
  payload: JSON.stringify({ ids }),
});

describe('warm-up', () => {
  it('loads each id once and later reads are L1 hits', async () => {
    const table = uniqueTable('warm');
    const loads: string[] = [];
    const store = await openStore({
      [table]: {
        load: (id) => {
          loads.push(id);
          return { id };
        },
      },
    });
    const server = await serveApp(store);
    const ids = Array.from({ length: 20 }, (_, i) => `p${i}`);
    const r = await server.inject(warmRequest(table, ids));
    expect(r.statusCode).toBe(200);
    expect(r.json()).toEqual({ warmed: 20, notFound: 0, failed: [] });
    expect(loads.sort()).toEqual([...ids].sort());
    const read = await server.inject(`/v1/tables/${table}/items/p7`);
    expect(read.headers['cache-status']).toMatch(/detail=l1$/);
    expect(loads).toHaveLength(20);
  });

  it(`keeps at most ${WARM_CONCURRENCY} reads in flight`, async () => {
    const table = uniqueTable('warm-bound');
    let running = 0;
    let peak = 0;
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 64,
        load: async (id) => {
          running++;
          peak = Math.max(peak, running);
          await delay(20);
          running--;
          return { id };
        },
      },
    });
    const server = await serveApp(store);
    const ids = Array.from({ length: 40 }, (_, i) => `c${i}`);
    const r = await server.inject(warmRequest(table, ids));
    expect(r.json().warmed).toBe(40);
    expect(peak).toBe(WARM_CONCURRENCY);
  });

  it('counts not-found ids and reports failures in request order with their codes', async () => {
    const table = uniqueTable('warm-mixed');
    const store = await openStore({
      [table]: {
        idPattern: '^[a-z0-9]+$',
        load: (id) => {
          if (id.startsWith('gone')) return undefined;
          if (id === 'boom') throw new Error('source exploded');
          return { id };
        },
      },
    });
    const server = await serveApp(store);
    const ids = ['a', 'gone1', 'BAD', 'boom', 'b', 'gone2', 'a'];
    const r = await server.inject(warmRequest(table, ids));
    expect(r.statusCode).toBe(200);
    expect(r.json()).toEqual({
      warmed: 3,
      notFound: 2,
      failed: [
        { id: 'BAD', code: 'ECC_BAD_ID' },
        { id: 'boom', code: 'ECC_LOAD_FAILED' },
      ],
    });
  });

  it('answers 404 ECC_UNKNOWN_TABLE for an unknown table, even with a bad body', async () => {
    const store = await openStore({ [uniqueTable('warm-known')]: { load: (id) => ({ id }) } });
    const server = await serveApp(store);
    const r = await server.inject(warmRequest('nope', [1]));
    expect(r.statusCode).toBe(404);
    expect(r.json().error.code).toBe('ECC_UNKNOWN_TABLE');
    // Before the body is read: an unparsable body or a wrong content type does not come first.
    for (const headers of [{}, { 'content-type': 'text/plain' }]) {
      const bad = await server.inject({
        ...warmRequest('nope', []),
        headers,
        payload: '{"ids": [',
      });
      expect([bad.statusCode, bad.json().error.code]).toEqual([404, 'ECC_UNKNOWN_TABLE']);
    }
  });

  it('answers an unauthenticated caller 401 before telling whether the table exists', async () => {
    const store = await openStore({ [uniqueTable('warm-hidden')]: { load: (id) => ({ id }) } });
    const server = await serveApp(store, 'warm-token');
    const r = await server.inject(warmRequest('nope', ['1']));
    expect([r.statusCode, r.json().error.code]).toEqual([401, 'ECC_UNAUTHORIZED']);
  });

  it('needs the admin token when one is set', async () => {
    const table = uniqueTable('warm-auth');
    const store = await openStore({ [table]: { load: (id) => ({ id }) } });
    const server = await serveApp(store, 'warm-token');
    const denied = await server.inject(warmRequest(table, ['1']));
    expect(denied.statusCode).toBe(401);
    expect(denied.json().error.code).toBe('ECC_UNAUTHORIZED');
    const allowed = await server.inject(
      warmRequest(table, ['1'], { authorization: 'Bearer warm-token' }),
    );
    expect(allowed.statusCode).toBe(200);
    expect(allowed.json().warmed).toBe(1);
  });
});
