/**
 * Batch reads: `Table.getMany` and the routes `GET …/items?ids=` and
 * `POST …/items:batchGet`. Every id is answered on its own, through the same
 * L1 → L2 → flight path as a single read.
 */
import { describe, expect, it } from 'vitest';
import { MAX_BATCH_IDS } from '../src/index.js';
import { serveApp } from './helpers/http.js';
import { latencyProxy } from './helpers/latency-proxy.js';
import { errorOf, openStore, plantEnvelope, scopedValkey } from './helpers/probe.js';
import { countingLoader, uniqueTable, valkeyUrl } from './helpers/store.js';

/** A loader with items `a`, `b`, `c`…: `missing` is not found, `boom` fails. */
const letters = async (id: string) => {
  if (id === 'boom') throw new Error('the source broke');
  if (id === 'missing') return undefined;
  return { id, name: `item ${id}` };
};

describe('Table.getMany', () => {
  it('answers each distinct id once, in order of first appearance: found, not found, or its coded error', async () => {
    const table = uniqueTable('many');
    const store = await openStore({ [table]: { load: letters } });
    const entries = await store
      .table(table)
      .getMany(['b', 'a', 'missing', 'b', 'bad\u0000', 'boom', 'a']);
    expect(entries.map((e) => e.id)).toEqual(['b', 'a', 'missing', 'bad\u0000', 'boom']);
    const [b, a, missing, bad, boom] = entries;
    expect(b?.ok && b.result.found && b.result.value).toEqual({ id: 'b', name: 'item b' });
    expect(a?.ok && a.result.found && a.result.value).toEqual({ id: 'a', name: 'item a' });
    expect(missing?.ok && missing.result.found).toBe(false);
    expect(!bad?.ok && bad?.error.code).toBe('ECC_BAD_ID');
    expect(!boom?.ok && boom?.error.code).toBe('ECC_LOAD_FAILED');
  });

  it(`answers no ids with none, and refuses more than ${MAX_BATCH_IDS} with ECC_BAD_REQUEST`, async () => {
    const table = uniqueTable('many-bounds');
    const loader = countingLoader();
    const store = await openStore({ [table]: { load: loader.load } });
    const t = store.table(table);
    expect(await t.getMany([])).toEqual([]);
    const tooMany = Array.from({ length: MAX_BATCH_IDS + 1 }, (_, i) => String(i));
    expect((await errorOf(t.getMany(tooMany))).code).toBe('ECC_BAD_REQUEST');
    expect(loader.calls()).toBe(0);
  });

  it('coalesces its ids with concurrent single reads: one load per id', async () => {
    const table = uniqueTable('many-herd');
    const loader = countingLoader(50);
    const store = await openStore({ [table]: { load: loader.load } });
    const t = store.table(table);
    const singles = Array.from({ length: 5 }, () => t.get('x'));
    const [entries] = await Promise.all([t.getMany(['x', 'y', 'x']), ...singles]);
    expect(loader.calls()).toBe(2);
    expect(entries.every((e) => e.ok && e.result.found)).toBe(true);
    expect(t.stats().coalesced).toBe(5);
    // Now in L1: answered in the caller.
    const again = await t.getMany(['x', 'y']);
    expect(again.map((e) => e.ok && e.result.layer)).toEqual(['l1', 'l1']);
  });

  it('reads 50 ids held in Valkey in one round trip', async () => {
    const table = uniqueTable('many-rtt');
    const raw = scopedValkey();
    const ids = Array.from({ length: 50 }, (_, i) => `r${i}`);
    await Promise.all(ids.map((id) => plantEnvelope(raw, table, id, { value: { id } })));
    const proxy = await latencyProxy(valkeyUrl(), 40);
    const loader = countingLoader();
    const store = await openStore(
      { [table]: { load: loader.load } },
      { valkey: proxy.url, readyTimeoutMs: 5_000 },
    );
    const t = store.table(table);
    // The first script call on a connection may need a second trip (NOSCRIPT, then EVAL).
    await t.get('warm-up');
    // That read is answered as its fill is sent: the fill's answer comes before PING's (one
    // connection, in order), so the round trips counted next are the batch's alone.
    await store.valkey.ping();
    const before = proxy.roundTrips();
    const started = performance.now();
    const entries = await t.getMany(ids);
    const elapsedMs = performance.now() - started;
    expect(entries.every((e) => e.ok && e.result.found && e.result.layer === 'l2')).toBe(true);
    expect(proxy.roundTrips() - before).toBe(1);
    // One round trip is 2 × 40 ms through the proxy; 50 sequential ones would be 4 s.
    expect(elapsedMs).toBeLessThan(1_000);
    expect(loader.calls()).toBe(1);
  });

  it('reads and fills 20 cold ids in two round trips and one loadMany call', async () => {
    const table = uniqueTable('many-cold');
    const proxy = await latencyProxy(valkeyUrl(), 40);
    const calls: string[][] = [];
    const store = await openStore(
      {
        [table]: {
          loadMany: async (batch) => {
            calls.push([...batch]);
            return new Map(batch.map((id) => [id, { id }]));
          },
          // Each id of a batch holds an admission slot from the start: 20 ids need 20.
          initialConcurrentLoads: 32,
        },
      },
      { valkey: proxy.url, readyTimeoutMs: 5_000 },
    );
    const t = store.table(table);
    await t.get('warm-up');
    // The warm-up's fill is sent as its caller is answered: PING waits for it to be answered,
    // so its round trip is counted before `before`, not in the batch's.
    await store.valkey.ping();
    const before = proxy.roundTrips();
    const ids = Array.from({ length: 20 }, (_, i) => `c${i}`);
    const entries = await t.getMany(ids);
    expect(entries.every((e) => e.ok && e.result.found && e.result.stored)).toBe(true);
    // readOrLease for every id, then fillAndRelease for every id (sent as the reads were
    // answered: PING, sent next, shares their round trip and is answered after them).
    await store.valkey.ping();
    expect(proxy.roundTrips() - before).toBe(2);
    expect(calls.slice(1)).toEqual([ids]);
  });
});

describe('batch read routes', () => {
  async function app(load = letters) {
    const table = uniqueTable('batch-http');
    const store = await openStore({ [table]: { load } });
    return { table, app: await serveApp(store) };
  }

  it('GET …/items?ids= answers 200 with one item per distinct id: found, not_found or error', async () => {
    const { table, app: server } = await app();
    const res = await server.inject(`/v1/tables/${table}/items?ids=a,missing,a,%ZZ,boom,b%2Cc,x+y`);
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
    const { items } = res.json();
    expect(items.map((i: { id: string }) => i.id)).toEqual([
      'a',
      'missing',
      '%ZZ',
      'boom',
      'b,c',
      'x y',
    ]);
    const [a, missing, bad, boom, comma] = items;
    expect(a).toMatchObject({ status: 'found', value: { id: 'a', name: 'item a' } });
    expect(a.version).toBeTypeOf('number');
    expect(a.cacheStatus).toMatch(/^echostore; fwd=miss; fwd-status=200; stored; ttl=\d+$/);
    expect(missing).toMatchObject({ status: 'not_found' });
    expect(missing.cacheStatus).toContain('fwd-status=404');
    expect(bad).toMatchObject({ status: 'error', error: { code: 'ECC_BAD_ID' } });
    expect(boom).toEqual({
      id: 'boom',
      status: 'error',
      error: { code: 'ECC_LOAD_FAILED', message: 'the source failed to load the item' },
    });
    expect(comma).toMatchObject({ status: 'found', value: { id: 'b,c' } });
    // The second read of `a` is an L1 hit.
    const again = await server.inject(`/v1/tables/${table}/items?ids=a`);
    expect(again.json().items[0].cacheStatus).toMatch(/detail=l1$/);
  });

  it('POST …/items:batchGet answers the same for a JSON list of ids', async () => {
    const { table, app: server } = await app();
    const res = await server.inject({
      method: 'POST',
      url: `/v1/tables/${table}/items:batchGet`,
      payload: { ids: ['b', 'missing', '', 'b'] },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().items.map((i: { id: string; status: string }) => [i.id, i.status])).toEqual([
      ['b', 'found'],
      ['missing', 'not_found'],
      ['', 'error'],
    ]);
  });

  it('refuses a request without ids, with too many, or with a body that breaks the schema: 400 ECC_BAD_REQUEST', async () => {
    const { table, app: server } = await app();
    const many = Array.from({ length: MAX_BATCH_IDS + 1 }, (_, i) => `i${i}`);
    const gets = [
      `/v1/tables/${table}/items`,
      `/v1/tables/${table}/items?ids=`,
      `/v1/tables/${table}/items?ids=a&ids=b`,
      `/v1/tables/${table}/items?ids=${many.join(',')}`,
    ];
    for (const url of gets) {
      const res = await server.inject(url);
      expect(res.statusCode, url).toBe(400);
      expect(res.json().error.code, url).toBe('ECC_BAD_REQUEST');
    }
    const bodies = [
      { ids: [] },
      { ids: many },
      { ids: [1] },
      { ids: 'a' },
      { ids: ['a'], x: 1 },
      {},
    ];
    for (const payload of bodies) {
      const res = await server.inject({
        method: 'POST',
        url: `/v1/tables/${table}/items:batchGet`,
        payload,
      });
      expect(res.statusCode, JSON.stringify(payload).slice(0, 40)).toBe(400);
      expect(res.json().error.code).toBe('ECC_BAD_REQUEST');
    }
  });

  it('answers 404 ECC_UNKNOWN_TABLE for an unknown table before looking at the ids', async () => {
    const { app: server } = await app();
    const get = await server.inject('/v1/tables/nope/items');
    expect(get.statusCode).toBe(404);
    expect(get.json().error.code).toBe('ECC_UNKNOWN_TABLE');
    const post = await server.inject({
      method: 'POST',
      url: '/v1/tables/nope/items:batchGet',
      payload: { ids: 3 },
    });
    expect(post.statusCode).toBe(404);
    expect(post.json().error.code).toBe('ECC_UNKNOWN_TABLE');
    // Before the body is read: neither an unparsable body nor a wrong content type comes first.
    for (const [type, payload] of [
      ['application/json', '{"ids": ['],
      ['text/plain', 'a,b'],
    ]) {
      const r = await server.inject({
        method: 'POST',
        url: '/v1/tables/nope/items:batchGet',
        headers: { 'content-type': type as string },
        payload,
      });
      expect([r.statusCode, r.json().error.code]).toEqual([404, 'ECC_UNKNOWN_TABLE']);
    }
  });

  it('answers other methods with 405 and Allow', async () => {
    const { table, app: server } = await app();
    const put = await server.inject({ method: 'PUT', url: `/v1/tables/${table}/items?ids=a` });
    expect(put.statusCode).toBe(405);
    expect(put.headers.allow).toBe('GET, HEAD, OPTIONS');
    const get = await server.inject(`/v1/tables/${table}/items:batchGet`);
    expect(get.statusCode).toBe(405);
    expect(get.headers.allow).toBe('POST, OPTIONS');
  });
});
