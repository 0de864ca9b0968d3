import { get as httpGet, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { describe, expect, it, vi } from 'vitest';
import { HOLD_PREFIX, startOrigin } from '../harness/origin.js';
import { startServiceProcess } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One GET on a new connection (no keep-alive pool): shows whether the listener still accepts. */
function getFresh(url: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpGet(url, { agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
  });
}

describe('shutdown', () => {
  it('on SIGTERM: /readyz 503 at once, serves for shutdownDelayMs, then stops accepting, answers what it holds, exits 0', async () => {
    const origin = await startOrigin(0);
    try {
      const table = uniqueTable('shutdown');
      const service = await startServiceProcess({
        valkey: { url: valkeyUrl() },
        http: { shutdownDelayMs: 1_500 },
        tables: { [table]: { source: { kind: 'http', url: origin.template } } },
      });
      const item = (id: string) => `${service.url}/v1/tables/${table}/items/${id}`;
      expect((await getFresh(`${service.url}/readyz`)).status).toBe(200);
      const held = getFresh(item(`${HOLD_PREFIX}1`));
      expect(await origin.seen(`${HOLD_PREFIX}1`, 3_000)).toBe(true);

      const signalledAt = performance.now();
      service.process.kill('SIGTERM');
      await vi.waitFor(
        async () => {
          const r = await getFresh(`${service.url}/readyz`);
          expect(r.status).toBe(503);
          expect(JSON.parse(r.body)).toMatchObject({ status: 'closing' });
        },
        { timeout: 1_000, interval: 10 },
      );
      expect(performance.now() - signalledAt).toBeLessThan(500);

      // Still serving, new connections included, cold reads too; each answer says Connection: close.
      const during = await getFresh(item('cold-during-delay'));
      expect(during.status).toBe(200);
      expect(during.headers.connection).toBe('close');
      expect(performance.now() - signalledAt).toBeLessThan(1_500);

      // Then the listener stops accepting...
      await vi.waitFor(
        async () => {
          await expect(getFresh(`${service.url}/healthz`)).rejects.toMatchObject({
            code: 'ECONNREFUSED',
          });
        },
        { timeout: 5_000, interval: 25 },
      );
      expect(performance.now() - signalledAt).toBeGreaterThanOrEqual(1_400);
      // ...but the request it holds is answered, and only then does the process exit.
      expect(service.process.exitCode).toBe(null);
      origin.release(`${HOLD_PREFIX}1`);
      expect((await held).status).toBe(200);
      expect(await service.exited).toBe(0);
      const messages = service.logs().map((l) => l.msg);
      expect(messages).toContain('stopping: not ready, still serving');
      expect(messages).toContain('stopping: no longer accepting connections');
    } finally {
      await origin.close();
    }
  });

  it('a client that never finishes its request does not hold the close: exit 0 within the budget', async () => {
    const origin = await startOrigin(0);
    const service = await startServiceProcess({
      valkey: { url: valkeyUrl() },
      http: { shutdownDelayMs: 200 },
      tables: { [uniqueTable('slowloris')]: { source: { kind: 'http', url: origin.template } } },
    });
    const { hostname, port } = new URL(service.url);
    // Headers without their blank line, and a PUT whose body stops after 3 of 10 bytes.
    const half = [
      'GET /healthz HTTP/1.1\r\nHost: x\r\n',
      'PUT /v1/tables/t/items/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{"a',
    ].map((text) => {
      const socket = connect(Number(port), hostname);
      socket.on('error', () => {});
      socket.write(text);
      return socket;
    });
    try {
      await vi.waitFor(async () =>
        expect((await getFresh(`${service.url}/healthz`)).status).toBe(200),
      );
      const t = performance.now();
      service.process.kill('SIGTERM');
      expect(await service.exited).toBe(0);
      // Closed about STORE_GRACE_MS + 1 s after the delay, well before the 15 s budget (exit 1).
      expect(performance.now() - t).toBeLessThan(10_000);
    } finally {
      for (const socket of half) socket.destroy();
      await origin.close();
    }
  });

  it('exits at once with code 1 on a second signal during the delay', async () => {
    const origin = await startOrigin(0);
    try {
      const service = await startServiceProcess({
        valkey: { url: valkeyUrl() },
        http: { shutdownDelayMs: 30_000 },
        tables: { [uniqueTable('twice')]: { source: { kind: 'http', url: origin.template } } },
      });
      service.process.kill('SIGTERM');
      await vi.waitFor(async () =>
        expect((await getFresh(`${service.url}/readyz`)).status).toBe(503),
      );
      const t = performance.now();
      service.process.kill('SIGTERM');
      expect(await service.exited).toBe(1);
      expect(performance.now() - t).toBeLessThan(2_000);
    } finally {
      await origin.close();
    }
  });
});
