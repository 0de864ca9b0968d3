/**
 * The bad-input corpus: what a client can get wrong, one row each, with the
 * status and code it must answer. No client mistake may yield a 5xx, every
 * error answer is `{ error: { code, message } }`, and no message echoes more
 * than 200 characters of the request.
 */
import { type AddressInfo, connect } from 'node:net';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_MESSAGE_CHARS } from '../src/http/errors.js';
import { buildServer } from '../src/http/server.js';
import { createStore, type Store } from '../src/index.js';
import { rawExchange } from './helpers/http.js';
import { uniqueTable, valkeyTarget } from './helpers/store.js';

const TOKEN = 'corpus-admin-token';
const ADMIN = { authorization: `Bearer ${TOKEN}` };
const JSON_TYPE = { 'content-type': 'application/json' };
const BODY_LIMIT_BYTES = 64 * 1024;
const ITEM_ALLOW = 'GET, HEAD, PUT, DELETE, OPTIONS';

const items = uniqueTable('corpus-items');
const other = uniqueTable('corpus-other');
const item = (id: string, table = items) => `/v1/tables/${table}/items/${id}`;
const warm = (table = items) => `/v1/tables/${table}/warm`;
const put = (id: string, payload: string | undefined, headers: Record<string, string> = {}) =>
  ({
    method: 'PUT',
    url: item(id),
    headers: { ...ADMIN, ...headers },
    ...(payload === undefined ? {} : { payload }),
  }) satisfies InjectOptions;
const warmBody = (body: unknown, headers: Record<string, string> = ADMIN) =>
  ({
    method: 'POST',
    url: warm(),
    headers: { ...headers, ...JSON_TYPE },
    payload: JSON.stringify(body),
  }) satisfies InjectOptions;

interface Case {
  name: string;
  request: InjectOptions | string;
  status: number;
  /** The error code; absent for a successful answer. */
  code?: string;
  /** Further checks on the answer. */
  check?: (r: LightMyRequestResponse) => void | Promise<void>;
}

const idEcho = (id: string) => (r: LightMyRequestResponse) => expect(r.json()).toEqual({ id });
const allow = (value: string) => (r: LightMyRequestResponse) => expect(r.headers.allow).toBe(value);
const challenge = (r: LightMyRequestResponse) =>
  expect(r.headers['www-authenticate']).toBe('Bearer realm="echostore"');

const CASES: Case[] = [
  // Ids: 1–512 bytes of printable, well-formed UTF-8.
  { name: 'empty id', request: item(''), status: 400, code: 'ECC_BAD_ID' },
  { name: '512-byte ASCII id', request: item('x'.repeat(512)), status: 200 },
  { name: '513-byte ASCII id', request: item('x'.repeat(513)), status: 400, code: 'ECC_BAD_ID' },
  {
    name: '512 bytes of 2-byte UTF-8 (é x 256)',
    request: item(encodeURIComponent('é'.repeat(256))),
    status: 200,
    check: idEcho('é'.repeat(256)),
  },
  {
    name: '513 bytes ending in 2-byte UTF-8',
    request: item(encodeURIComponent(`a${'é'.repeat(256)}`)),
    status: 400,
    code: 'ECC_BAD_ID',
  },
  {
    name: '512 bytes ending in 3-byte UTF-8 (ab + € x 170)',
    request: item(encodeURIComponent(`ab${'€'.repeat(170)}`)),
    status: 200,
  },
  {
    name: '513 bytes ending in 3-byte UTF-8',
    request: item(encodeURIComponent(`abc${'€'.repeat(170)}`)),
    status: 400,
    code: 'ECC_BAD_ID',
  },
  {
    name: '512 bytes of 4-byte UTF-8 (😀 x 128)',
    request: item(encodeURIComponent('😀'.repeat(128))),
    status: 200,
  },
  {
    name: '513 bytes ending in 4-byte UTF-8',
    request: item(encodeURIComponent(`a${'😀'.repeat(128)}`)),
    status: 400,
    code: 'ECC_BAD_ID',
  },
  { name: 'NUL in an id (%00)', request: item('a%00b'), status: 400, code: 'ECC_BAD_ID' },
  { name: 'control char %01', request: item('%01'), status: 400, code: 'ECC_BAD_ID' },
  { name: 'control char %1F', request: item('a%1F'), status: 400, code: 'ECC_BAD_ID' },
  { name: 'DEL (%7F)', request: item('a%7Fb'), status: 400, code: 'ECC_BAD_ID' },
  { name: 'C1 control NEL (%C2%85)', request: item('a%C2%85'), status: 400, code: 'ECC_BAD_ID' },
  { name: 'braces in an id', request: item('%7Ba%7D'), status: 200, check: idEcho('{a}') },
  { name: 'colons in an id', request: item('a:b:c'), status: 200, check: idEcho('a:b:c') },
  {
    name: 'an id shaped like a lease key suffix (a}:lease)',
    request: item(encodeURIComponent('a}:lease')),
    status: 200,
    check: idEcho('a}:lease'),
  },
  { name: 'percent-encoded slash', request: item('a%2Fb'), status: 200, check: idEcho('a/b') },
  {
    name: 'truncated percent-escape %E0%A4%A',
    request: item('%E0%A4%A'),
    status: 400,
    code: 'ECC_BAD_ID',
  },
  { name: 'non-hex escape %ZZ', request: item('%ZZ'), status: 400, code: 'ECC_BAD_ID' },
  { name: 'a bare %', request: item('%'), status: 400, code: 'ECC_BAD_ID' },
  { name: 'overlong UTF-8 %C0%AF', request: item('%C0%AF'), status: 400, code: 'ECC_BAD_ID' },
  {
    name: 'UTF-8 surrogate %ED%A0%80',
    request: item('%ED%A0%80'),
    status: 400,
    code: 'ECC_BAD_ID',
  },
  { name: '10 KB id', request: item('x'.repeat(10 * 1024)), status: 400, code: 'ECC_BAD_ID' },
  {
    name: '100 KB id (over the router param limit)',
    request: item('x'.repeat(100 * 1024)),
    status: 400,
    code: 'ECC_BAD_ID',
  },
  {
    name: 'id breaking the table idPattern',
    request: item('abc', other),
    status: 400,
    code: 'ECC_BAD_ID',
  },
  { name: 'id matching the table idPattern', request: item('42', other), status: 200 },
  {
    name: 'bad id on PUT',
    request: { ...put('%01', '{"a":1}', JSON_TYPE) },
    status: 400,
    code: 'ECC_BAD_ID',
  },

  // Tables: [a-z0-9_-]{1,64} and configured.
  {
    name: 'uppercase table',
    request: item('1', items.toUpperCase()),
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
  },
  {
    name: '65-character table',
    request: item('1', 'a'.repeat(65)),
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
  },
  {
    name: '__proto__ table',
    request: item('1', '__proto__'),
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
  },
  {
    name: 'constructor table',
    request: item('1', 'constructor'),
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
  },
  {
    name: '10 KB table name',
    request: item('1', 't'.repeat(10 * 1024)),
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
  },
  {
    name: 'DELETE on an unknown table',
    request: { method: 'DELETE', url: item('1', 'nope'), headers: ADMIN },
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
  },

  // Routes and methods.
  { name: 'root path', request: '/', status: 404, code: 'ECC_ROUTE_NOT_FOUND' },
  // Batch reads: a bad id is answered in its item; a bad list is a 400.
  {
    name: 'batch read without ids',
    request: `/v1/tables/${items}/items`,
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'batch read with a malformed id among good ones',
    request: `/v1/tables/${items}/items?ids=1,%E0%A4%A,2`,
    status: 200,
    check: (r) =>
      expect(r.json().items.map((i: { status: string }) => i.status)).toEqual([
        'found',
        'error',
        'found',
      ]),
  },
  {
    name: 'batch read body with ids that are not strings',
    request: {
      method: 'POST',
      url: `/v1/tables/${items}/items:batchGet`,
      headers: JSON_TYPE,
      payload: '{"ids":[1,2]}',
    },
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'batch read body that is not JSON',
    request: {
      method: 'POST',
      url: `/v1/tables/${items}/items:batchGet`,
      headers: JSON_TYPE,
      payload: '{"ids":',
    },
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'extra path segment',
    request: `${item('1')}/extra`,
    status: 404,
    code: 'ECC_ROUTE_NOT_FOUND',
  },
  {
    name: 'unknown collection',
    request: `/v1/tables/${items}/things/1`,
    status: 404,
    code: 'ECC_ROUTE_NOT_FOUND',
  },
  {
    name: 'DELETE on /v1/tables',
    request: { method: 'DELETE', url: '/v1/tables' },
    status: 404,
    code: 'ECC_ROUTE_NOT_FOUND',
  },
  {
    name: 'POST on an item',
    request: { method: 'POST', url: item('1'), headers: JSON_TYPE, payload: '{}' },
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    check: allow(ITEM_ALLOW),
  },
  {
    name: 'PATCH on an item',
    request: { method: 'PATCH', url: item('1') },
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    check: allow(ITEM_ALLOW),
  },
  {
    name: 'TRACE on an item',
    request: { method: 'TRACE', url: item('1') },
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    check: allow(ITEM_ALLOW),
  },
  {
    name: 'PROPFIND on an item (a method Node parses that fastify does not route by default)',
    request: { method: 'PROPFIND', url: item('1') } as InjectOptions,
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    check: allow(ITEM_ALLOW),
  },
  {
    name: 'PURGE on an item',
    request: { method: 'PURGE', url: item('1') } as InjectOptions,
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    check: allow(ITEM_ALLOW),
  },
  {
    name: 'QUERY on an item',
    request: { method: 'QUERY', url: item('1') } as InjectOptions,
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    check: allow(ITEM_ALLOW),
  },
  {
    name: 'POST on an item with a text/plain body',
    request: {
      method: 'POST',
      url: item('1'),
      headers: { 'content-type': 'text/plain' },
      payload: 'x',
    },
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    check: allow(ITEM_ALLOW),
  },
  {
    name: 'OPTIONS on an item',
    request: { method: 'OPTIONS', url: item('1') },
    status: 204,
    check: allow(ITEM_ALLOW),
  },
  {
    name: 'GET on the warm-up route',
    request: warm(),
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    check: allow('POST, OPTIONS'),
  },

  // PUT bodies.
  {
    name: 'PUT without a body',
    request: put('b1', undefined),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'PUT with an empty JSON body',
    request: put('b1', '', JSON_TYPE),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'PUT with a whitespace body',
    request: put('b1', ' \n\t ', JSON_TYPE),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'PUT with invalid JSON',
    request: put('b1', '{nope', JSON_TYPE),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'PUT with __proto__ poisoning',
    request: put('b1', '{"__proto__":{"admin":true}}', JSON_TYPE),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'PUT with constructor.prototype poisoning',
    request: put('b1', '{"constructor":{"prototype":{"admin":true}}}', JSON_TYPE),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'PUT with text/plain',
    request: put('b1', '{"a":1}', { 'content-type': 'text/plain' }),
    status: 415,
    code: 'ECC_UNSUPPORTED_MEDIA_TYPE',
  },
  {
    name: 'PUT with a body and no content type',
    request: put('b1', '{"a":1}'),
    status: 415,
    code: 'ECC_UNSUPPORTED_MEDIA_TYPE',
  },
  {
    name: 'PUT with a JSON-like media type',
    request: put('b1', '{}', { 'content-type': 'application/json-patch+json' }),
    status: 415,
    code: 'ECC_UNSUPPORTED_MEDIA_TYPE',
  },
  {
    name: 'PUT with charset=latin1',
    request: put('b1', '{"a":1}', { 'content-type': 'application/json; charset=latin1' }),
    status: 415,
    code: 'ECC_UNSUPPORTED_MEDIA_TYPE',
  },
  {
    name: 'PUT with Content-Encoding: gzip (a coded body is not stored as is)',
    request: put('b1', '{"a":1}', { ...JSON_TYPE, 'content-encoding': 'gzip' }),
    status: 415,
    code: 'ECC_UNSUPPORTED_MEDIA_TYPE',
  },
  {
    name: 'PUT with Content-Encoding: identity',
    request: put('b3', '{"a":1}', { ...JSON_TYPE, 'content-encoding': 'identity' }),
    status: 200,
  },
  {
    name: 'PUT with charset=UTF-8 (quoted, upper case)',
    request: put('b2', '{"a":1}', { 'content-type': 'application/json; charset="UTF-8"' }),
    status: 200,
  },
  {
    name: 'PUT over the body limit',
    request: put('b1', JSON.stringify({ s: 'x'.repeat(BODY_LIMIT_BYTES) }), JSON_TYPE),
    status: 413,
    code: 'ECC_PAYLOAD_TOO_LARGE',
  },
  {
    name: 'PUT with 6,000-level nesting',
    request: put('b1', `${'['.repeat(6000)}${']'.repeat(6000)}`, JSON_TYPE),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'PUT null round-trips',
    request: put('null-value', 'null', JSON_TYPE),
    status: 200,
    check: roundTrip('null-value', null),
  },
  {
    name: 'PUT a bare number round-trips',
    request: put('number-value', '42', JSON_TYPE),
    status: 200,
    check: roundTrip('number-value', 42),
  },
  {
    name: 'PUT a bare string round-trips',
    request: put('string-value', '"hi"', JSON_TYPE),
    status: 200,
    check: roundTrip('string-value', 'hi'),
  },

  // Admin auth.
  {
    name: 'PUT without a token',
    request: { method: 'PUT', url: item('a1'), headers: JSON_TYPE, payload: '{}' },
    status: 401,
    code: 'ECC_UNAUTHORIZED',
    check: challenge,
  },
  {
    name: 'PUT with a wrong token',
    request: put('a1', '{}', { ...JSON_TYPE, authorization: 'Bearer not-the-token' }),
    status: 401,
    code: 'ECC_UNAUTHORIZED',
    check: challenge,
  },
  {
    name: 'PUT with the token plus a suffix',
    request: put('a1', '{}', { ...JSON_TYPE, authorization: `Bearer ${TOKEN}x` }),
    status: 401,
    code: 'ECC_UNAUTHORIZED',
  },
  {
    name: 'PUT with the token under the Basic scheme',
    request: put('a1', '{}', { ...JSON_TYPE, authorization: `Basic ${TOKEN}` }),
    status: 401,
    code: 'ECC_UNAUTHORIZED',
  },
  {
    name: 'PUT with the right token (scheme in lower case)',
    request: put('a1', '{}', { ...JSON_TYPE, authorization: `bearer ${TOKEN}` }),
    status: 200,
  },
  {
    name: 'unauthorised PUT with a bad body is 401, not 400',
    request: { method: 'PUT', url: item('a1'), headers: JSON_TYPE, payload: '{nope' },
    status: 401,
    code: 'ECC_UNAUTHORIZED',
  },
  {
    name: 'DELETE without a token',
    request: { method: 'DELETE', url: item('a1') },
    status: 401,
    code: 'ECC_UNAUTHORIZED',
  },
  {
    name: 'DELETE with the right token',
    request: { method: 'DELETE', url: item('a1'), headers: ADMIN },
    status: 204,
  },
  {
    name: 'warm-up without a token',
    request: warmBody({ ids: ['1'] }, {}),
    status: 401,
    code: 'ECC_UNAUTHORIZED',
  },
  { name: 'GET needs no token', request: item('open'), status: 200 },

  // Warm-up bodies.
  {
    name: 'warm-up body is an array',
    request: warmBody(['1']),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'warm-up ids is a string',
    request: warmBody({ ids: '1' }),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'warm-up with no ids',
    request: warmBody({ ids: [] }),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'warm-up with 1,001 ids',
    request: warmBody({ ids: Array.from({ length: 1001 }, (_, i) => String(i)) }),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'warm-up with number ids',
    request: warmBody({ ids: [1, 2] }),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'warm-up with a null id',
    request: warmBody({ ids: ['1', null] }),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'warm-up with an unknown field',
    request: warmBody({ ids: ['1'], force: true }),
    status: 400,
    code: 'ECC_BAD_REQUEST',
  },
  {
    name: 'warm-up on an unknown table',
    request: { ...warmBody({ ids: ['1'] }), url: warm('nope') },
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
  },
  {
    name: 'warm-up with valid and invalid ids',
    request: warmBody({ ids: ['w1', '', 'w2', '\u0001', 'x'.repeat(513), 'missing'] }),
    status: 200,
    check: (r) =>
      expect(r.json()).toEqual({
        warmed: 2,
        notFound: 1,
        failed: [
          { id: '', code: 'ECC_BAD_ID' },
          { id: '\u0001', code: 'ECC_BAD_ID' },
          { id: 'x'.repeat(513), code: 'ECC_BAD_ID' },
        ],
      }),
  },
];

let app: FastifyInstance;
let store: Store;

function roundTrip(id: string, value: unknown) {
  return async () => {
    const read = await app.inject(item(id));
    expect(read.statusCode).toBe(200);
    expect(read.json()).toEqual(value);
  };
}

/** The invariants of every answer: never a 5xx; an error is coded JSON with a bounded message. */
function expectCodedAnswer(
  status: number,
  contentType: string | undefined,
  body: string,
  code: string | undefined,
): void {
  expect(status).toBeLessThan(500);
  if (code === undefined) return;
  expect(contentType).toMatch(/^application\/json/);
  const parsed = JSON.parse(body);
  expect(Object.keys(parsed)).toEqual(['error']);
  expect(parsed.error.code).toBe(code);
  expect(typeof parsed.error.message).toBe('string');
  expect(parsed.error.message.length).toBeLessThanOrEqual(MAX_MESSAGE_CHARS + 1);
}

beforeAll(async () => {
  store = await createStore({
    valkey: valkeyTarget(),
    tables: {
      [items]: { load: (id) => (id === 'missing' ? undefined : { id }) },
      [other]: { idPattern: '^[0-9]+$', load: (id) => ({ id }) },
    },
  });
  app = buildServer({
    store,
    logger: pino({ level: 'silent' }),
    bodyLimitBytes: BODY_LIMIT_BYTES,
    adminToken: TOKEN,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await app.close();
  await store.close();
});

describe('bad input through app.inject', () => {
  it('has at least 50 cases, each named once', () => {
    expect(CASES.length).toBeGreaterThanOrEqual(50);
    expect(new Set(CASES.map((c) => c.name)).size).toBe(CASES.length);
  });

  it.each(CASES)('$name -> $status $code', async ({ request, status, code, check }) => {
    const r = await app.inject(request);
    expect(r.statusCode).toBe(status);
    expectCodedAnswer(r.statusCode, r.headers['content-type']?.toString(), r.body, code);
    if (code === undefined && r.body !== '') expect(r.json()).not.toHaveProperty('error');
    await check?.(r);
  });
});

interface RawCase {
  name: string;
  /** The request bytes; `{items}` is replaced by the table name. */
  text: string;
  status: number;
  code?: string;
  /** Whether the server must close the connection after answering. */
  closes: boolean;
  check?: (headers: Record<string, string>, body: string) => void;
}

const RAW_CASES: RawCase[] = [
  {
    name: 'bogus method',
    text: 'FROB / HTTP/1.1\r\nHost: x\r\n\r\n',
    status: 400,
    code: 'ECC_BAD_REQUEST',
    closes: true,
  },
  {
    name: 'non-numeric Content-Length',
    text: 'PUT /v1/tables/{items}/items/1 HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
    status: 400,
    code: 'ECC_BAD_REQUEST',
    closes: true,
  },
  {
    name: 'two different Content-Lengths',
    text: 'PUT /v1/tables/{items}/items/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}',
    status: 400,
    code: 'ECC_BAD_REQUEST',
    closes: true,
  },
  {
    name: 'Content-Length together with chunked Transfer-Encoding',
    text: 'PUT /v1/tables/{items}/items/1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n',
    status: 400,
    code: 'ECC_BAD_REQUEST',
    closes: true,
  },
  {
    name: 'a malformed chunk size',
    text: 'PUT /v1/tables/{items}/items/1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
    status: 400,
    code: 'ECC_BAD_REQUEST',
    closes: true,
  },
  {
    name: 'NUL in a header value',
    text: 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\u0000b\r\n\r\n',
    status: 400,
    code: 'ECC_BAD_REQUEST',
    closes: true,
  },
  {
    name: 'two Host lines on a read',
    text: 'GET /v1/tables/{items}/items/1 HTTP/1.1\r\nHost: localhost\r\nhost: evil.example\r\n\r\n',
    status: 400,
    code: 'ECC_BAD_REQUEST',
    closes: true,
  },
  {
    name: 'HTTP/1.1 without Host',
    text: 'GET /healthz HTTP/1.1\r\n\r\n',
    status: 400,
    code: 'ECC_BAD_REQUEST',
    closes: true,
  },
  {
    name: '20 KB URL (over the 16 KiB header limit)',
    text: `GET /v1/tables/{items}/items/${'x'.repeat(20 * 1024)} HTTP/1.1\r\nHost: x\r\n\r\n`,
    status: 431,
    code: 'ECC_HEADERS_TOO_LARGE',
    closes: true,
  },
  {
    name: '20 KB header',
    text: `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'x'.repeat(20 * 1024)}\r\n\r\n`,
    status: 431,
    code: 'ECC_HEADERS_TOO_LARGE',
    closes: true,
  },
  {
    name: '10 KB id over real HTTP',
    text: `GET /v1/tables/{items}/items/${'x'.repeat(10 * 1024)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
    status: 400,
    code: 'ECC_BAD_ID',
    closes: true,
  },
  {
    name: 'literal dot-dot id (no normalisation)',
    text: 'GET /v1/tables/{items}/items/.. HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    status: 200,
    closes: true,
    check: (_headers, body) => expect(JSON.parse(body)).toEqual({ id: '..' }),
  },
  {
    name: 'percent-encoded dot-dot id (no normalisation)',
    text: 'GET /v1/tables/{items}/items/%2e%2e HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    status: 200,
    closes: true,
    check: (_headers, body) => expect(JSON.parse(body)).toEqual({ id: '..' }),
  },
  {
    name: 'dot-dot table',
    text: 'GET /v1/tables/../items/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
    closes: true,
  },
  {
    name: 'percent-encoded dot-dot table',
    text: 'GET /v1/tables/%2E%2E/items/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    status: 404,
    code: 'ECC_UNKNOWN_TABLE',
    closes: true,
  },
  {
    name: 'an Expect other than 100-continue',
    text: 'GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\n\r\n',
    status: 417,
    code: 'ECC_EXPECTATION_FAILED',
    closes: true,
  },
  {
    name: 'POST to an unknown path with a malformed JSON body',
    text: 'POST /nothing HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{a',
    status: 404,
    code: 'ECC_ROUTE_NOT_FOUND',
    closes: true,
  },
  {
    name: 'POST to an unknown path with an invalid content type',
    text: 'POST /nothing HTTP/1.1\r\nHost: x\r\nContent-Type: //\r\nContent-Length: 2\r\nConnection: close\r\n\r\nzz',
    status: 404,
    code: 'ECC_ROUTE_NOT_FOUND',
    closes: true,
  },
  ...['text/plain', 'application/json', '//', undefined].map((type) => ({
    name: `DELETE with a ${type ?? 'untyped'} body (ignored)`,
    text: `DELETE /v1/tables/{items}/items/zz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n${type === undefined ? '' : `Content-Type: ${type}\r\n`}Content-Length: 2\r\nConnection: close\r\n\r\n{a`,
    status: 204,
    closes: true,
  })),
  {
    name: 'OPTIONS with a malformed JSON body (ignored)',
    text: 'OPTIONS /v1/tables/{items}/items/zz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{a',
    status: 204,
    closes: true,
    check: (headers) => expect(headers.allow).toBe(ITEM_ALLOW),
  },
  {
    name: 'CONNECT',
    text: 'CONNECT 127.0.0.1:6379 HTTP/1.1\r\nHost: 127.0.0.1:6379\r\n\r\n',
    status: 405,
    code: 'ECC_METHOD_NOT_ALLOWED',
    closes: true,
    check: (headers) => expect(headers.allow).toBe(''),
  },
];

describe('bad input over real HTTP', () => {
  it('keeps the connection after a 404 whose body was not JSON: the next request is answered', async () => {
    const port = (app.server.address() as AddressInfo).port;
    const answers = await new Promise<string>((resolve) => {
      let text = '';
      const socket = connect(port, '127.0.0.1', () =>
        socket.write(
          'POST /nothing HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{a' +
            'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
        ),
      );
      socket.setEncoding('utf8').on('data', (c: string) => {
        text += c;
      });
      socket.on('close', () => resolve(text));
    });
    const statuses = [...answers.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1]);
    expect(statuses).toEqual(['404', '200']);
    expect(answers).toContain('ECC_ROUTE_NOT_FOUND');
  });

  it('answers requests sent before the client half-closed (nc -N), then closes', async () => {
    const port = (app.server.address() as AddressInfo).port;
    const answers = await new Promise<string>((resolve) => {
      let text = '';
      // A miss (a load) and a PUT behind it, then FIN: both are answered before the close.
      const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () =>
        socket.end(
          `GET ${item(`half-${Date.now()}`)} HTTP/1.1\r\nHost: x\r\n\r\n` +
            `PUT ${item('half-put')} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n` +
            'Content-Type: application/json\r\nContent-Length: 7\r\n\r\n{"n":1}',
        ),
      );
      socket.setEncoding('utf8').on('data', (c: string) => {
        text += c;
      });
      socket.on('close', () => resolve(text));
    });
    expect([...answers.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1])).toEqual(['200', '200']);
    expect((await app.inject({ url: item('half-put') })).json()).toEqual({ n: 1 });
  });

  it.each(RAW_CASES)('$name -> $status $code', async ({ text, status, code, closes, check }) => {
    const port = (app.server.address() as AddressInfo).port;
    const r = await rawExchange(port, text.replace('{items}', items));
    expect(r.status).toBe(status);
    expectCodedAnswer(r.status, r.headers['content-type'], r.body, code);
    if (code !== undefined) expect(r.headers.connection).toMatch(/^close$/i);
    expect(r.closed).toBe(closes);
    check?.(r.headers, r.body);
  });
});
