import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { createStore, type Store } from '../src/index.js';
import { type RawAnswer, rawExchange } from './helpers/http.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

/**
 * Over real sockets, not `inject`: what matters is what Node writes on the
 * wire. The store's clock stands still, so `Cache-Status: ttl=` cannot tick
 * between a GET and its HEAD.
 */
describe('HEAD and 304', () => {
  const table = uniqueTable('head');
  let store: Store;
  let app: FastifyInstance;
  let port: number;

  beforeAll(async () => {
    store = await createStore({
      valkey: valkeyUrl(),
      now: () => 1_000_000,
      tables: {
        [table]: { load: (id) => (id === 'missing' ? undefined : { id, name: `item ${id}` }) },
      },
    });
    app = buildServer({ store, logger: pino({ level: 'silent' }) });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await app.close();
    await store.close();
  });

  const send = (method: 'GET' | 'HEAD', path: string, extra = ''): Promise<RawAnswer> =>
    rawExchange(
      port,
      `${method} ${path} HTTP/1.1\r\nHost: test\r\n${extra}Connection: close\r\n\r\n`,
    );
  const withoutDate = (headers: Record<string, string>) => {
    const { date: _, ...rest } = headers;
    return rest;
  };

  it('answers a 304 without Content-Length, to GET and to HEAD', async () => {
    const path = `/v1/tables/${table}/items/etag`;
    const first = await send('GET', path);
    expect(first.status).toBe(200);
    const etag = first.headers.etag as string;
    expect(etag).toMatch(/^"[\w-]+"$/);
    for (const method of ['GET', 'HEAD'] as const) {
      const r = await send(method, path, `If-None-Match: ${etag}\r\n`);
      expect(r.status, method).toBe(304);
      expect(r.headers, method).not.toHaveProperty('content-length');
      expect(r.headers, method).not.toHaveProperty('transfer-encoding');
      expect(r.headers.etag, method).toBe(etag);
      expect(r.headers['cache-status'], method).toMatch(/^echostore; hit; ttl=\d+; detail=l1$/);
      expect(r.body, method).toBe('');
    }
  });

  it("answers HEAD with exactly GET's headers and no body", async () => {
    await send('GET', `/v1/tables/${table}/items/h1`); // now an L1 row: both reads below are hits
    await send('GET', `/v1/tables/${table}/items/missing`);
    const cases: [string, string, number][] = [
      ['an L1 hit', `/v1/tables/${table}/items/h1`, 200],
      ['a cached "not found"', `/v1/tables/${table}/items/missing`, 404],
      ['an unknown table', '/v1/tables/nope/items/1', 404],
      ['a bad id', `/v1/tables/${table}/items/%E2%80%AE`, 400],
      ['readiness', '/readyz', 200],
      ['liveness', '/healthz', 200],
    ];
    for (const [what, path, status] of cases) {
      const get = await send('GET', path);
      const head = await send('HEAD', path);
      expect(get.status, what).toBe(status);
      expect(head.status, what).toBe(status);
      expect(withoutDate(head.headers), what).toEqual(withoutDate(get.headers));
      expect(Number(head.headers['content-length']), what).toBe(Buffer.byteLength(get.body));
      expect(get.body.length, what).toBeGreaterThan(0);
      expect(head.body, what).toBe('');
    }
  });
});
