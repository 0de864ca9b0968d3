/**
 * Connections a client leaves in a bad state: a body that never ends, and a
 * malformed request pipelined behind a good one. Over real sockets.
 */
import { type AddressInfo, connect } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it, onTestFinished } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { rawExchange } from './helpers/http.js';
import { openStore, scopedValkey, storedValue } from './helpers/probe.js';
import { uniqueTable } from './helpers/store.js';

async function listening(table: string, requestTimeoutMs?: number) {
  const store = await openStore({ [table]: { load: (id) => ({ id }) } });
  const app = buildServer({
    store,
    logger: pino({ level: 'silent' }),
    ...(requestTimeoutMs === undefined ? {} : { requestTimeoutMs }),
  });
  onTestFinished(() => app.close());
  await app.listen({ host: '127.0.0.1', port: 0 });
  return (app.server.address() as AddressInfo).port;
}

describe('connections', () => {
  it('a request body that never ends is answered 408 ECC_REQUEST_TIMEOUT and its connection closed', async () => {
    const table = uniqueTable('slow-body');
    const port = await listening(table, 1_000);
    const started = performance.now();
    const answer = await rawExchange(
      port,
      `PUT /v1/tables/${table}/items/k HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n[\r\n`,
      10_000,
    );
    expect(answer.status).toBe(408);
    expect(JSON.parse(answer.body)).toMatchObject({ error: { code: 'ECC_REQUEST_TIMEOUT' } });
    expect(answer.closed).toBe(true);
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it('a malformed request pipelined behind a PUT does not take the PUT’s answer: the PUT is answered, then the connection closes', async () => {
    const table = uniqueTable('pipelined');
    const raw = scopedValkey();
    const port = await listening(table);
    const answer = await rawExchange(
      port,
      `PUT /v1/tables/${table}/items/p HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n7` +
        'GET /x HTTP/1.1\r\nHost: localhost\r\nContent-Length: zz\r\n\r\n',
      5_000,
    );
    expect(answer.status).toBe(200);
    expect(answer.closed).toBe(true);
    expect(await storedValue(raw, table, 'p')).toBe(7);
  });

  it('a client that half-closes after a PUT and a malformed request gets the PUT’s 200, then the 400', async () => {
    const table = uniqueTable('half-malformed');
    const port = await listening(table);
    // Node ends a half-closed connection as soon as its last answer finishes; the malformed
    // request's 400 must be written before that. The race went either way: ten tries.
    for (let i = 0; i < 10; i++) {
      const answers = await new Promise<string>((resolve) => {
        let text = '';
        const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () =>
          socket.end(
            `PUT /v1/tables/${table}/items/h${i} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n${i}` +
              'BOGUS / HTTP/1.1\r\nHost: localhost\r\n\r\n',
          ),
        );
        socket.setEncoding('utf8').on('data', (c: string) => {
          text += c;
        });
        socket.on('error', () => {});
        socket.on('close', () => resolve(text));
      });
      expect([...answers.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1])).toEqual(['200', '400']);
      expect(answers).toContain('ECC_BAD_REQUEST');
    }
  });
});
