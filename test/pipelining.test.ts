/**
 * HTTP/1.1 pipelining over raw sockets (RFC 9112 §9.3.2): requests sent in
 * one TCP write on one connection. A request after an unsafe one is handled
 * after it; every valid request before a malformed one is answered.
 */

import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it, onTestFinished } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { openStore } from './helpers/probe.js';
import { uniqueTable } from './helpers/store.js';

/** One response read off the wire. */
interface Response {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Splits what came back on one connection into responses (each with Content-Length, or none for 204/304). */
function responses(raw: Buffer): Response[] {
  const out: Response[] = [];
  let at = 0;
  for (;;) {
    const end = raw.indexOf('\r\n\r\n', at);
    if (end < 0) return out;
    const [statusLine = '', ...lines] = raw.subarray(at, end).toString('latin1').split('\r\n');
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    const length = Number(headers['content-length'] ?? 0);
    const body = raw.subarray(end + 4, end + 4 + length).toString('utf8');
    out.push({ status: Number(statusLine.split(' ')[1]), headers, body });
    at = end + 4 + length;
  }
}

/** Writes `text` in one write on a new connection; reads until the server closes it or `timeoutMs`. */
function exchange(port: number, text: string, timeoutMs = 5_000): Promise<Response[]> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    const timer = setTimeout(() => socket.destroy(), timeoutMs);
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(responses(Buffer.concat(chunks)));
    });
  });
}

/** A listening server over a table whose source answers `{ from: "source" }`, after `loadMs`. */
async function listening(table: string, loadMs = 0) {
  const store = await openStore({
    [table]: {
      load: async () => {
        if (loadMs > 0) await new Promise((r) => setTimeout(r, loadMs));
        return { from: 'source' };
      },
    },
  });
  const app = buildServer({ store, logger: pino({ level: 'silent' }) });
  onTestFinished(() => app.close());
  await app.listen({ host: '127.0.0.1', port: 0 });
  return (app.server.address() as AddressInfo).port;
}

const get = (path: string, last = false) =>
  `GET ${path} HTTP/1.1\r\nHost: localhost\r\n${last ? 'Connection: close\r\n' : ''}\r\n`;
const put = (path: string, json: string) =>
  `PUT ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`;

describe('pipelining', () => {
  it('a GET pipelined behind a PUT of the same id answers the PUT’s value (10 of 10)', async () => {
    const table = uniqueTable('pipe-put');
    const port = await listening(table);
    for (let i = 0; i < 10; i++) {
      const path = `/v1/tables/${table}/items/x${i}`;
      // The pre-PUT row is in L1: a GET handled before the PUT would answer it.
      const [before] = await exchange(port, get(path, true));
      expect(JSON.parse(before?.body ?? '')).toEqual({ from: 'source' });
      const answers = await exchange(port, put(path, `{"n":${i}}`) + get(path, true));
      expect(answers.map((a) => a.status)).toEqual([200, 200]);
      expect(JSON.parse(answers[1]?.body ?? '')).toEqual({ n: i });
    }
  });

  it('a PUT pipelined behind a slow GET of the same id runs after it: the GET answers the old value', async () => {
    const table = uniqueTable('pipe-get-put');
    const port = await listening(table, 200);
    const path = `/v1/tables/${table}/items/slow`;
    const answers = await exchange(port, get(path) + put(path, '{"n":1}') + get(path, true));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(JSON.parse(answers[0]?.body ?? '')).toEqual({ from: 'source' });
    expect(JSON.parse(answers[2]?.body ?? '')).toEqual({ n: 1 });
  });

  it('three valid GETs before a malformed request are all answered, then the 400, then the close', async () => {
    const table = uniqueTable('pipe-bad');
    const port = await listening(table, 50);
    const path = (id: string) => `/v1/tables/${table}/items/${id}`;
    const answers = await exchange(
      port,
      get(path('a')) +
        get(path('b')) +
        get(path('c')) +
        'GET /x HTTP/1.1\r\nHost: localhost\r\nContent-Length: zz\r\n\r\n',
    );
    expect(answers.slice(0, 3).map((a) => a.status)).toEqual([200, 200, 200]);
    expect(answers[3]?.status).toBe(400);
    expect(JSON.parse(answers[3]?.body ?? '')).toMatchObject({
      error: { code: 'ECC_BAD_REQUEST' },
    });
  });
});
