/**
 * What the HTTP layer logs for an error answer, and what it tells the client:
 * a bug (ECC_INTERNAL) at error level with its stack; other 5xx at warn with
 * code, table, clipped id and the cause's message, no stack; 4xx at debug.
 * A 5xx answer never carries the cause's details.
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { buildServer } from '../src/http/server.js';
import type { Store } from '../src/index.js';
import { rawExchange } from './helpers/http.js';
import { openStore } from './helpers/probe.js';
import { uniqueTable } from './helpers/store.js';

interface LogLine {
  level: number;
  msg: string;
  code?: string;
  table?: string;
  id?: string;
  cause?: string;
  err?: { message: string; stack?: string };
  [field: string]: unknown;
}

const WARN = 40;
const ERROR = 50;
const DEBUG = 20;

/** A server whose log lines (trace and up) are collected in `lines`. */
function serverWithLog(store: Store, adminToken?: string) {
  const lines: LogLine[] = [];
  const logger = pino(
    { level: 'trace' },
    { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) },
  );
  const app = buildServer({ store, logger, ...(adminToken === undefined ? {} : { adminToken }) });
  return { app, lines, text: () => JSON.stringify(lines) };
}

let app: FastifyInstance | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

describe('error logging and client messages', () => {
  it('logs a failed load at warn with code, table, clipped id and cause, and tells the client no details', async () => {
    const table = uniqueTable('log-fail');
    const store = await openStore({
      [table]: {
        load: () => Promise.reject(new Error('db at 10.0.0.5 refused: password expired')),
      },
    });
    const s = serverWithLog(store);
    app = s.app;
    const id = 'i'.repeat(300);
    const r = await app.inject(`/v1/tables/${table}/items/${id}`);
    expect(r.statusCode).toBe(502);
    expect(r.json().error.code).toBe('ECC_LOAD_FAILED');
    expect(r.body).not.toContain('10.0.0.5');
    expect(r.body).not.toContain('password');

    const line = s.lines.find((l) => l.code === 'ECC_LOAD_FAILED');
    expect(line?.level).toBe(WARN);
    expect(line?.table).toBe(table);
    expect(line?.id?.length).toBeLessThanOrEqual(101);
    expect(line?.id?.startsWith('iii')).toBe(true);
    expect(line?.cause).toContain('password expired');
    expect(s.text()).not.toContain('"stack"');
    expect(s.lines.some((l) => l.level >= ERROR)).toBe(false);
  });

  it('binds each error line to its request id, though no line is made for a request that logs nothing', async () => {
    const table = uniqueTable('log-reqid');
    const store = await openStore({
      [table]: {
        load: (id: string) =>
          id === 'bad' ? Promise.reject(new Error('source down')) : Promise.resolve({ id }),
      },
    });
    const s = serverWithLog(store);
    app = s.app;
    expect((await app.inject(`/v1/tables/${table}/items/good`)).statusCode).toBe(200);
    expect(s.lines.filter((l) => l.reqId !== undefined)).toEqual([]);
    const r = await app.inject(`/v1/tables/${table}/items/bad`);
    expect(r.statusCode).toBe(502);
    const line = s.lines.find((l) => l.code === 'ECC_LOAD_FAILED');
    expect(typeof line?.reqId).toBe('string');
    expect(line?.reqId).not.toBe('');
  });

  it('of repeated 5xx answers of one kind (code, table, kind of cause), warns once a window; the rest at debug', async () => {
    const [a, b] = [uniqueTable('log-repeat-a'), uniqueTable('log-repeat-b')];
    const failing = {
      load: (id: string) =>
        Promise.reject(id === 'odd' ? new TypeError('not JSON') : new Error('source down')),
    };
    const store = await openStore({ [a]: failing, [b]: failing });
    const s = serverWithLog(store);
    app = s.app;
    for (const id of ['1', '2', 'odd', '3']) {
      expect((await app.inject(`/v1/tables/${a}/items/${id}`)).statusCode).toBe(502);
    }
    expect((await app.inject(`/v1/tables/${b}/items/1`)).statusCode).toBe(502);
    const failed = s.lines.filter((l) => l.code === 'ECC_LOAD_FAILED' && l.id !== undefined);
    expect(failed.map((l) => [l.table, l.id, l.level])).toEqual([
      [a, '1', WARN],
      [a, '2', DEBUG],
      // Another kind of cause on the same table: not hidden behind the first.
      [a, 'odd', WARN],
      [a, '3', DEBUG],
      [b, '1', WARN],
    ]);
  });

  it('logs a bug (ECC_INTERNAL) at error level with its stack and answers a bare message', async () => {
    const broken = {
      registry: new Registry(),
      tables: () => [],
      table: () => ({
        get: () => {
          throw new TypeError('cannot read properties of undefined (secret internals)');
        },
      }),
    } as unknown as Store;
    const s = serverWithLog(broken);
    app = s.app;
    const r = await app.inject('/v1/tables/any/items/1');
    expect(r.statusCode).toBe(500);
    expect(r.json()).toEqual({ error: { code: 'ECC_INTERNAL', message: 'internal error' } });
    const line = s.lines.find((l) => l.code === 'ECC_INTERNAL');
    expect(line?.level).toBe(ERROR);
    expect(line?.err?.stack).toContain('TypeError');
  });

  it('logs client mistakes at debug, never above', async () => {
    const table = uniqueTable('log-4xx');
    const store = await openStore({ [table]: { load: (id) => ({ id }) } });
    const s = serverWithLog(store);
    app = s.app;
    const r = await app.inject(`/v1/tables/${table}/items/%01`);
    expect(r.json().error.code).toBe('ECC_BAD_ID');
    const line = s.lines.find((l) => l.code === 'ECC_BAD_ID');
    expect(line?.level).toBe(DEBUG);
    expect(s.lines.some((l) => l.level > DEBUG)).toBe(false);
  });

  it('never logs the admin token or request headers', async () => {
    const token = 'tok-3c1f9a77d2e84b06';
    const table = uniqueTable('log-auth');
    const store = await openStore({
      [table]: { load: () => Promise.reject(new Error('source down')) },
    });
    const s = serverWithLog(store, token);
    app = s.app;
    const url = `/v1/tables/${table}/items/1`;
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    expect((await app.inject({ method: 'PUT', url, headers, payload: '{nope' })).statusCode).toBe(
      400,
    );
    expect((await app.inject({ url, headers })).statusCode).toBe(502);
    const wrong = { authorization: `Bearer ${token}-wrong` };
    expect((await app.inject({ method: 'DELETE', url, headers: wrong })).statusCode).toBe(401);
    // A parse error's rawPacket holds the raw request, Authorization included.
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as AddressInfo).port;
    const raw = await rawExchange(
      port,
      `FROB / HTTP/1.1\r\nAuthorization: Bearer ${token}\r\n\r\n`,
    );
    expect(raw.status).toBe(400);
    expect(s.lines.some((l) => l.parserCode === 'HPE_INVALID_METHOD')).toBe(true);
    expect(s.lines.length).toBeGreaterThan(3);
    expect(s.text()).not.toContain(token);
    expect(s.text()).not.toContain('authorization');
    expect(s.text()).not.toContain('rawPacket');
  });
});
