import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, parseMetrics } from '../harness/metrics.js';
import { ITEM_PATH } from '../src/http/items.js';
import { buildServer } from '../src/http/server.js';
import { createStore, type Store } from '../src/index.js';
import { manualClock } from './helpers/clock.js';
import { pipelinedExchange, type RawAnswer, type RawRequest } from './helpers/http.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

/**
 * The L1 hit answered before fastify (`src/http/l1-hits.ts`), over real
 * sockets. Each comparison sends the same item twice in one pipelined write:
 * plain (this path) and with an `If-None-Match` no tag matches (fastify's item
 * route, which answers it 200 all the same), so both are handled in one tick
 * on one clock. An `onRequest` hook records which requests reached fastify.
 */
describe('the L1 hit answered before fastify', () => {
  const clock = manualClock(1_000_000_000);
  const fresh = uniqueTable('hit');
  const bare = uniqueTable('hit-bare');
  const stale = uniqueTable('hit-stale');
  const slow = uniqueTable('hit-slow');
  const policy = { ttlMs: 100_000, staleMs: 60_000, jitter: 0, earlyRefreshBeta: 0 };
  let store: Store;
  let app: FastifyInstance;
  let port: number;
  /** `METHOD url` of each request fastify saw, with its If-None-Match when any. */
  const seen: string[] = [];

  const load = (id: string) => (id.startsWith('missing') ? undefined : { id, name: `item ${id}` });

  beforeAll(async () => {
    store = await createStore({
      valkey: valkeyUrl(),
      now: clock.now,
      tables: {
        [fresh]: { load, ...policy, l1: { ttlMs: 600_000 } },
        [bare]: { load, ...policy, cacheHeaders: false, l1: { ttlMs: 600_000 } },
        [stale]: { load, ...policy, l1: { ttlMs: 600_000 } },
        [slow]: { load: (id) => sleep(300).then(() => load(id)), ...policy },
      },
    });
    app = await listening(store);
    port = (app.server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await app.close();
    await store.close();
  });

  async function listening(s: Store, accessLogSampleRate = 0): Promise<FastifyInstance> {
    const a = buildServer({ store: s, logger: pino({ level: 'silent' }), accessLogSampleRate });
    a.addHook('onRequest', (request, _reply, done) => {
      const tag = request.headers['if-none-match'];
      seen.push(`${request.method} ${request.url}${tag === undefined ? '' : ` ${tag}`}`);
      done();
    });
    await a.listen({ host: '127.0.0.1', port: 0 });
    return a;
  }

  const item = (table: string, id: string) => `/v1/tables/${table}/items/${id}`;
  const NO_MATCH = { 'If-None-Match': '"no-such-tag"' };
  const withoutDate = ({ headers }: RawAnswer) => {
    const { date: _, ...rest } = headers;
    return rest;
  };

  const CLOSER: RawRequest = { method: 'GET', path: '/healthz' };

  /**
   * Sends `requests` pipelined, then a `/healthz` that closes the connection (so each of
   * `requests` is a keep-alive one alike); returns their answers and which reached fastify.
   */
  async function send(requests: RawRequest[], to = port) {
    const before = seen.length;
    const answers = await pipelinedExchange(to, [...requests, CLOSER]);
    expect(answers).toHaveLength(requests.length + 1);
    const fastify = seen.slice(before).filter((r) => r !== 'GET /healthz');
    return { answers: answers.slice(0, -1), fastify };
  }

  it("answers a plain GET and HEAD of an L1 row with the item route's status, headers and body", async () => {
    // Punctuation the router hands on as it is: this path must read the same id from the URL.
    const odd = "a:b@c!$&'()*+,=~-._";
    const items = [
      [fresh, 'a1'],
      [bare, 'b1'],
      [fresh, odd],
    ] as const;
    for (const [table, id] of items) await send([{ method: 'GET', path: item(table, id) }]); // now L1 rows
    for (const [table, id] of items) {
      for (const method of ['GET', 'HEAD']) {
        const path = item(table, id);
        const { answers, fastify } = await send([
          { method, path },
          { method, path, headers: NO_MATCH },
        ]);
        const [hit, routed] = answers as [RawAnswer, RawAnswer];
        // Only the conditional request reached fastify: the plain one was answered before it.
        expect(fastify, `${method} ${table}`).toEqual([`${method} ${path} "no-such-tag"`]);
        expect(hit.status).toBe(200);
        expect(hit.status).toBe(routed.status);
        // Same names, same values, same order (Date aside: it may tick between the two).
        expect(Object.entries(withoutDate(hit))).toEqual(Object.entries(withoutDate(routed)));
        expect(hit.body).toBe(routed.body);
        expect(hit.headers['cache-status']).toMatch(/^echostore; hit; ttl=\d+; detail=l1$/);
      }
    }
    const [get, head] = (
      await send([
        { method: 'GET', path: item(fresh, 'a1') },
        { method: 'HEAD', path: item(fresh, 'a1') },
      ])
    ).answers as [RawAnswer, RawAnswer];
    expect(get.body).toBe(JSON.stringify({ id: 'a1', name: 'item a1' }));
    expect(head.body).toBe('');
    expect(Number(head.headers['content-length'])).toBe(Buffer.byteLength(get.body));
    expect(get.headers['cache-control']).toMatch(/^max-age=\d+, stale-while-revalidate=60/);
    expect(withoutDate(head)).toEqual(withoutDate(get));
  });

  it('answers a row served stale (stale-while-revalidate) as the item route does', async () => {
    await send([{ method: 'GET', path: item(stale, 's1') }]);
    clock.advance(policy.ttlMs + 5_000);
    const path = item(stale, 's1');
    const { answers, fastify } = await send([
      { method: 'GET', path },
      { method: 'GET', path, headers: NO_MATCH },
    ]);
    const [hit, routed] = answers as [RawAnswer, RawAnswer];
    expect(fastify).toEqual([`GET ${path} "no-such-tag"`]);
    expect(hit.headers['cache-status']).toMatch(/^echostore; hit; ttl=-\d+; detail=l1-stale$/);
    expect(Object.entries(withoutDate(hit))).toEqual(Object.entries(withoutDate(routed)));
    expect(hit.body).toBe(routed.body);
  });

  it("counts each hit once: in the table's hits and in the item route's request metrics", async () => {
    await send([{ method: 'GET', path: item(fresh, 'm1') }]);
    const count = async (method: string) =>
      metric(parseMetrics(await store.registry.metrics()), 'http_request_duration_seconds_count', {
        method,
        route: ITEM_PATH,
        code: '2xx',
      }) ?? 0;
    const hits = store.table(fresh).stats().hits;
    const [gets, heads] = [await count('GET'), await count('HEAD')];
    const { fastify } = await send([
      { method: 'GET', path: item(fresh, 'm1') },
      { method: 'GET', path: item(fresh, 'm1') },
      { method: 'HEAD', path: item(fresh, 'm1') },
    ]);
    expect(fastify).toEqual([]);
    expect(store.table(fresh).stats().hits - hits).toBe(3);
    expect((await count('GET')) - gets).toBe(2);
    expect((await count('HEAD')) - heads).toBe(1);
  });

  it('times a hit pipelined behind a slow answer until it is sent, as fastify would', async () => {
    await send([{ method: 'GET', path: item(fresh, 'q1') }]);
    const bucket = async (le: string) =>
      metric(parseMetrics(await store.registry.metrics()), 'http_request_duration_seconds_bucket', {
        method: 'GET',
        route: ITEM_PATH,
        code: '2xx',
        le,
      }) ?? 0;
    const [fast, all] = [await bucket('0.25'), await bucket('+Inf')];
    // A miss whose load takes 300 ms, then a hit: the hit cannot be sent before the miss is.
    const { answers, fastify } = await send([
      { method: 'GET', path: item(slow, 'q1') },
      { method: 'GET', path: item(fresh, 'q1') },
    ]);
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    expect(answers[1]?.headers['cache-status']).toMatch(/detail=l1$/);
    expect(fastify).toEqual([`GET ${item(slow, 'q1')}`]);
    expect((await bucket('+Inf')) - all).toBe(2);
    // Both took longer than 250 ms, the hit too: none of the two is in the 0.25 s bucket.
    expect((await bucket('0.25')) - fast).toBe(0);
  });

  it('hands fastify every request it does not answer, and fastify answers it as before', async () => {
    await send([{ method: 'GET', path: item(fresh, 'h1') }]);
    await send([{ method: 'GET', path: item(fresh, 'missing1') }]);
    const etag = (await send([{ method: 'GET', path: item(fresh, 'h1') }])).answers[0]?.headers
      .etag as string;
    const cases: Array<[string, RawRequest, number]> = [
      ['a miss', { method: 'GET', path: item(fresh, 'h2') }, 200],
      ['a cached "not found"', { method: 'GET', path: item(fresh, 'missing1') }, 404],
      ['a percent-escaped id', { method: 'GET', path: item(fresh, 'h%31') }, 200],
      ['a query string', { method: 'GET', path: `${item(fresh, 'h1')}?x=1` }, 200],
      [
        'a matching If-None-Match',
        { method: 'GET', path: item(fresh, 'h1'), headers: { 'If-None-Match': etag } },
        304,
      ],
      [
        'a read-your-writes header',
        { method: 'GET', path: item(fresh, 'h1'), headers: { 'Echostore-Min-Lsn': '0/1' } },
        400,
      ],
      ['an unknown table', { method: 'GET', path: item('nope', 'h1') }, 404],
      ['another method', { method: 'OPTIONS', path: item(fresh, 'h1') }, 204],
    ];
    for (const [what, request, status] of cases) {
      const { answers, fastify } = await send([request]);
      expect(answers[0]?.status, what).toBe(status);
      expect(fastify, what).toHaveLength(1);
    }
    // A row born before a purge this instance knows of: fastify judges it once, then it is a plain hit.
    await store.table(fresh).purge({ tags: ['no-row-has-it'] });
    for (const expected of [1, 0]) {
      const { answers, fastify } = await send([{ method: 'GET', path: item(fresh, 'h1') }]);
      expect(answers[0]?.status).toBe(200);
      expect(answers[0]?.headers['cache-status']).toMatch(/detail=l1$/);
      expect(fastify).toHaveLength(expected);
    }
  });

  it('is not installed with the access log on: every hit reaches fastify', async () => {
    const logged = await listening(store, 1);
    try {
      const to = (logged.server.address() as AddressInfo).port;
      await send([{ method: 'GET', path: item(fresh, 'z1') }], to);
      const { answers, fastify } = await send([{ method: 'GET', path: item(fresh, 'z1') }], to);
      expect(answers[0]?.headers['cache-status']).toMatch(/detail=l1$/);
      expect(fastify).toHaveLength(1);
    } finally {
      await logged.close();
    }
  });
});
