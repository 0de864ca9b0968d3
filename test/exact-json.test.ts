/**
 * A value's JSON text is stored as it was received, from a PUT or from an
 * http source, so that what `JSON.parse` then `JSON.stringify` would change
 * (an integer past 2^53, an exponent past the doubles) comes back unchanged;
 * and a body with a `__proto__` key is refused on both paths alike.
 * Against a real service process, a real Valkey and a real origin.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServiceProcess, startServiceProcess } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

/** What the origin answers for each id, as raw text; every answer is counted. */
const BODIES: Record<string, string> = {
  big: '{"n":12345678901234567890,"f":1.2345678901234567890123,"e":1e400}',
  top: '12345678901234567890',
  proto: '{"a":1,"__proto__":{"admin":true}}',
  escaped: '{"\\u005f_proto__":{"admin":true}}',
  ctor: '{"constructor":{"prototype":{"admin":true}}}',
  plain: '{"n":1,"s":"x"}',
};

describe('exact JSON text, from a PUT and from an http source', () => {
  const table = uniqueTable('exact-json');
  let origin: Server;
  let service: ServiceProcess;
  const reads = new Map<string, number>();
  const item = (id: string) => `${service.url}/v1/tables/${table}/items/${id}`;

  beforeAll(async () => {
    origin = createServer((req, res) => {
      const id = (req.url ?? '').split('/').at(-1) ?? '';
      reads.set(id, (reads.get(id) ?? 0) + 1);
      const body = BODIES[id];
      if (body === undefined) return res.writeHead(404).end();
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    const { port } = origin.address() as AddressInfo;
    service = await startServiceProcess(
      {
        valkey: { url: valkeyUrl() },
        tables: {
          [table]: {
            source: { kind: 'http', url: `http://127.0.0.1:${port}/items/{id}` },
            ttlMs: 60_000,
          },
        },
      },
      { inHook: true },
    );
  });
  afterAll(async () => {
    service?.process.kill('SIGKILL');
    origin?.closeAllConnections();
    await new Promise((r) => origin?.close(r));
  });

  it('answers a PUT integer past 2^53 unchanged: 12345678901234567890', async () => {
    for (const [id, body] of [
      ['p1', '12345678901234567890'],
      ['p2', '{"id":12345678901234567890,"x":[1e400,-0,0.1]}'],
    ] as const) {
      const put = await fetch(item(id), {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: `  ${body}\n`,
      });
      expect(put.status, id).toBe(200);
      const got = await fetch(item(id));
      expect(got.status).toBe(200);
      expect(await got.text(), id).toBe(body);
      expect(got.headers.get('etag')).toBe(put.headers.get('etag'));
    }
  });

  it('still refuses a PUT with __proto__ or constructor.prototype: 400 ECC_BAD_REQUEST', async () => {
    for (const body of [BODIES.proto, BODIES.escaped, BODIES.ctor]) {
      const put = await fetch(item('refused'), {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body,
      });
      expect(put.status, body).toBe(400);
      expect(((await put.json()) as { error: { code: string } }).error.code).toBe(
        'ECC_BAD_REQUEST',
      );
    }
  });

  it("answers an origin's integer past 2^53 unchanged, from the source and then from the cache", async () => {
    for (const id of ['big', 'top']) {
      const first = await fetch(item(id));
      expect(await first.text(), id).toBe(BODIES[id]);
      const second = await fetch(item(id));
      expect(await second.text(), id).toBe(BODIES[id]);
      expect(reads.get(id), id).toBe(1); // the second answer came from the cache
    }
    expect(await (await fetch(item('plain'))).text()).toBe(BODIES.plain);
  });

  it("refuses an origin's __proto__ or constructor.prototype as a PUT is refused: never served", async () => {
    for (const id of ['proto', 'escaped', 'ctor']) {
      const r = await fetch(item(id));
      expect(r.status, id).toBe(502);
      expect(((await r.json()) as { error: { code: string } }).error.code, id).toBe(
        'ECC_LOAD_FAILED',
      );
      // Not cached as a value: the next read fails too (a remembered failure, or a new load).
      expect((await fetch(item(id))).status, id).toBe(502);
    }
  });
});
