/**
 * Admin auth: with `adminToken` set, writes and warm-up need
 * `Authorization: Bearer <token>`; reads and operator routes stay open.
 */
import type { InjectOptions } from 'fastify';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { serveApp } from './helpers/http.js';
import { openStore } from './helpers/probe.js';
import { uniqueTable } from './helpers/store.js';

const TOKEN = 'admin-5d0e8c';

describe('admin auth', () => {
  it('answers 401 ECC_UNAUTHORIZED with a Bearer challenge to unauthenticated writes', async () => {
    const table = uniqueTable('auth');
    const server = await serveApp(await openStore({ [table]: { load: (id) => ({ id }) } }), TOKEN);
    const url = `/v1/tables/${table}/items/1`;
    const attempts: InjectOptions[] = [
      { method: 'PUT', url, payload: { a: 1 } },
      { method: 'PUT', url, payload: { a: 1 }, headers: { authorization: 'Bearer' } },
      {
        method: 'PUT',
        url,
        payload: { a: 1 },
        headers: { authorization: `Bearer ${'x'.repeat(500)}` },
      },
      { method: 'DELETE', url, headers: { authorization: TOKEN } },
      { method: 'DELETE', url, headers: { authorization: `Token ${TOKEN}` } },
    ];
    for (const attempt of attempts) {
      const r = await server.inject(attempt);
      expect(r.statusCode, JSON.stringify(attempt.headers)).toBe(401);
      expect(r.json().error.code).toBe('ECC_UNAUTHORIZED');
      expect(r.headers['www-authenticate']).toBe('Bearer realm="echostore"');
    }
    const put = await server.inject({
      method: 'PUT',
      url,
      payload: { a: 1 },
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(put.statusCode).toBe(200);
  });

  it('keeps reads and operator routes open', async () => {
    const table = uniqueTable('auth-open');
    const server = await serveApp(await openStore({ [table]: { load: (id) => ({ id }) } }), TOKEN);
    const open: InjectOptions[] = [
      { url: `/v1/tables/${table}/items/1` },
      { method: 'HEAD', url: `/v1/tables/${table}/items/1` },
      { method: 'OPTIONS', url: `/v1/tables/${table}/items/1` },
      { url: '/v1/tables' },
      { url: '/metrics' },
      { url: '/healthz' },
      { url: '/readyz' },
    ];
    for (const request of open) {
      const r = await server.inject(request);
      expect(r.statusCode, `${request.method ?? 'GET'} ${request.url}`).toBeLessThan(300);
    }
  });

  it('leaves writes open when no token is set', async () => {
    const table = uniqueTable('auth-none');
    const server = await serveApp(await openStore({ [table]: { load: (id) => ({ id }) } }));
    const r = await server.inject({
      method: 'PUT',
      url: `/v1/tables/${table}/items/1`,
      payload: { a: 1 },
    });
    expect(r.statusCode).toBe(200);
  });

  it('refuses an empty token or one with whitespace at construction', async () => {
    const store = await openStore({ [uniqueTable('auth-bad')]: { load: (id) => ({ id }) } });
    for (const adminToken of ['', 'two words', ' padded']) {
      expect(() => buildServer({ store, logger: pino({ level: 'silent' }), adminToken })).toThrow(
        TypeError,
      );
    }
  });
});
