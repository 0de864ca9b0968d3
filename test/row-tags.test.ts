/**
 * Row tags from each kind of source (an origin's `Surrogate-Key` and
 * `Cache-Tag`, a SQL column), and the purge route over HTTP. Source reads are
 * counted at the source: the origin's requests, the database's rows.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it, onTestFinished } from 'vitest';
import { buildSource, sourceFingerprint } from '../src/sources/index.js';
import { withTagsColumn } from '../src/sources/tags-column.js';
import { serveApp } from './helpers/http.js';
import { openStore } from './helpers/probe.js';
import { uniqueTable } from './helpers/store.js';

/** An origin answering `{ id, read }` with `headers`, counting its reads per id. */
async function taggingOrigin(headers: Record<string, string>) {
  const reads = new Map<string, number>();
  const server = createServer((req, res) => {
    const id = decodeURIComponent((req.url ?? '').replace('/items/', ''));
    const read = (reads.get(id) ?? 0) + 1;
    reads.set(id, read);
    res.writeHead(200, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify({ id, read }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/items/{id}`,
    readsOf: (id: string) => reads.get(id) ?? 0,
  };
}

describe('tags from an http origin', () => {
  it.each([
    ['Surrogate-Key, space-separated', { 'surrogate-key': 'product-1 category-5' }, 'category-5'],
    ['Cache-Tag, comma-separated', { 'cache-tag': 'product-1, category-5' }, 'category-5'],
  ])('%s tags the row: a purge of one of them reloads it', async (_why, headers, tag) => {
    const origin = await taggingOrigin(headers);
    const source = await buildSource({ kind: 'http', url: origin.url }, { loadTimeoutMs: 5_000 });
    onTestFinished(() => source.close());
    const table = uniqueTable('http-tags');
    const store = await openStore({ [table]: { load: source.load } });
    await store.table(table).get('1');
    await store.table(table).purge({ tags: ['not-this-one'] });
    expect((await store.table(table).get('1')).layer).toBe('l1');
    await store.table(table).purge({ tags: [tag] });
    const r = await store.table(table).get('1');
    expect(r.found && r.value).toEqual({ id: '1', read: 2 });
    expect(origin.readsOf('1')).toBe(2);
  });

  it('an origin sending more than 64 tags fails the load with ECC_BAD_ROW_TAGS', async () => {
    const many = Array.from({ length: 65 }, (_, i) => `t${i}`).join(' ');
    const origin = await taggingOrigin({ 'surrogate-key': many });
    const source = await buildSource({ kind: 'http', url: origin.url }, { loadTimeoutMs: 5_000 });
    onTestFinished(() => source.close());
    const table = uniqueTable('http-many-tags');
    const store = await openStore({ [table]: { load: source.load } });
    await expect(store.table(table).get('1')).rejects.toMatchObject({ code: 'ECC_BAD_ROW_TAGS' });
  });
});

describe('tags from a SQL column', () => {
  it('tagsColumn tags each row with its column (text or number); a purge reloads only its rows', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'echostore-tags-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'tags.sqlite');
    const db = new Database(file);
    db.exec(
      "CREATE TABLE items (id TEXT PRIMARY KEY, tags TEXT, brand INTEGER); INSERT INTO items VALUES ('a', 'red, big', 1), ('b', 'blue', 2), ('c', NULL, 1)",
    );
    db.close();
    const config = {
      kind: 'sqlite' as const,
      file,
      query: 'SELECT id, tags, brand FROM items WHERE id = ?',
      tagsColumn: 'tags',
    };
    const source = await buildSource(config, { loadTimeoutMs: 5_000 });
    onTestFinished(() => source.close());
    // Each loader call is one statement on the database: its reads.
    let reads = 0;
    const table = uniqueTable('sql-tags');
    const store = await openStore({
      [table]: {
        load: (id, ctx) => {
          reads++;
          return source.load(id, ctx);
        },
      },
    });
    for (const id of ['a', 'b', 'c']) await store.table(table).get(id);
    expect(reads).toBe(3);
    await store.table(table).purge({ tags: ['big'] });
    for (const id of ['a', 'b', 'c']) await store.table(table).get(id);
    expect(reads).toBe(4);
    // The column stays in the value.
    const r = await store.table(table).get('a');
    expect(r.found && r.value).toEqual({ id: 'a', tags: 'red, big', brand: 1 });
    // A numeric column: its decimal text.
    const byBrand = await buildSource({ ...config, tagsColumn: 'brand' }, { loadTimeoutMs: 5_000 });
    onTestFinished(() => byBrand.close());
    const brands = uniqueTable('sql-brand');
    let brandReads = 0;
    const s2 = await openStore({
      [brands]: {
        load: (id, ctx) => {
          brandReads++;
          return byBrand.load(id, ctx);
        },
      },
    });
    for (const id of ['a', 'b', 'c']) await s2.table(brands).get(id);
    await s2.table(brands).purge({ tags: ['1'] });
    for (const id of ['a', 'b', 'c']) await s2.table(brands).get(id);
    expect(brandReads).toBe(5);
  });

  it('a tagsColumn the query does not return is refused at start-up, naming the field', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'echostore-tags-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'tags.sqlite');
    const db = new Database(file);
    db.exec('CREATE TABLE items (id TEXT PRIMARY KEY, tags TEXT)');
    db.close();
    await expect(
      buildSource(
        {
          kind: 'sqlite',
          file,
          query: 'SELECT id, tags FROM items WHERE id = ?',
          tagsColumn: 'tag',
        },
        { field: 'tables.t.source', loadTimeoutMs: 5_000 },
      ),
    ).rejects.toMatchObject({
      code: 'ECC_BAD_CONFIG',
      field: 'tables.t.source.tagsColumn',
      message: 'tables.t.source.tagsColumn: the query returns no column "tag"; it returns id, tags',
    });
  });

  it('a row without the tagsColumn fails its load with ECC_BAD_ROW_TAGS naming it, caching nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'echostore-tags-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'tags.sqlite');
    const db = new Database(file);
    db.exec(
      "CREATE TABLE items (id TEXT PRIMARY KEY, tags TEXT); INSERT INTO items VALUES ('a', 'red')",
    );
    db.close();
    // The start-up check (above) is passed by: a row the query's columns promised lacks it.
    const plain = await buildSource(
      { kind: 'sqlite', file, query: 'SELECT id, tags FROM items WHERE id = ?' },
      { loadTimeoutMs: 5_000 },
    );
    onTestFinished(() => plain.close());
    const source = withTagsColumn(plain, 'tag');
    let reads = 0;
    const table = uniqueTable('sql-misnamed-tags');
    const store = await openStore({
      [table]: {
        load: (id, ctx) => {
          reads++;
          return source.load(id, ctx);
        },
      },
    });
    for (let i = 0; i < 2; i++) {
      const err = await store
        .table(table)
        .get('a')
        .catch((e) => e);
      expect(err).toMatchObject({ code: 'ECC_BAD_ROW_TAGS', table, id: 'a' });
      expect(err.message).toContain('no column "tag"');
      // What a client is told names the column too, never the driver's words.
      expect(err.publicMessage).toContain('source.tagsColumn');
    }
    // Nothing was cached: each get asked the source again.
    expect(reads).toBe(2);
    // A batched load (Postgres, MySQL) fails that row alone; a tagged row and a missing id pass.
    const batched = withTagsColumn(
      {
        load: async () => undefined,
        loadMany: async () =>
          new Map<string, unknown>([
            ['a', { id: 'a' }],
            ['b', { id: 'b', tag: 'red' }],
          ]),
        close: () => undefined,
      },
      'tag',
    );
    const many = await batched.loadMany?.(['a', 'b', 'zz'], { signal: AbortSignal.timeout(5_000) });
    expect(many?.get('a')).toMatchObject({ code: 'ECC_BAD_ROW_TAGS' });
    expect(many?.get('b')).toMatchObject({
      value: { id: 'b', tag: 'red' },
      policy: { tags: ['red'] },
    });
    expect(many?.get('zz')).toBeUndefined();
  });

  it('a source fingerprint names where rows come from, not the credentials or the directory', () => {
    const q = 'SELECT * FROM items WHERE id = ANY($1)';
    const a = sourceFingerprint({ kind: 'postgres', url: 'postgres://u:p@db:5432/shop', query: q });
    expect(a).toMatch(/^[0-9a-f]{16}$/);
    expect(
      sourceFingerprint({ kind: 'postgres', url: 'postgres://v:q@db:5432/shop', query: q }),
    ).toBe(a);
    expect(
      sourceFingerprint({ kind: 'postgres', url: 'postgres://u:p@db:5432/other', query: q }),
    ).not.toBe(a);
    expect(
      sourceFingerprint({ kind: 'mysql', url: 'mysql://u:p@db:5432/shop', query: q }),
    ).not.toBe(a);
    const sqlite = (file: string) => sourceFingerprint({ kind: 'sqlite', file, query: 'q' });
    expect(sqlite('/a/demo.sqlite')).toBe(sqlite('/b/demo.sqlite'));
  });
});

describe('the purge route', () => {
  it('POST /v1/tables/{table}/purge is an admin write answering { epoch }, with coded errors', async () => {
    const table = uniqueTable('purge-http');
    let reads = 0;
    const store = await openStore({ [table]: { load: (id) => ({ id, n: ++reads }) } });
    const token = 'purge-admin-token-1234';
    const app = await serveApp(store, token);
    const url = `/v1/tables/${table}/purge`;
    const auth = { authorization: `Bearer ${token}` };
    expect(
      (await app.inject({ method: 'GET', url: `/v1/tables/${table}/items/1` })).statusCode,
    ).toBe(200);
    const open = await app.inject({ method: 'POST', url, payload: { all: true } });
    expect(open.statusCode).toBe(401);
    expect(open.json().error.code).toBe('ECC_UNAUTHORIZED');
    const ok = await app.inject({ method: 'POST', url, headers: auth, payload: { all: true } });
    expect(ok.statusCode).toBe(200);
    expect(Number.isSafeInteger(ok.json().epoch)).toBe(true);
    const again = await app.inject({ method: 'GET', url: `/v1/tables/${table}/items/1` });
    expect(again.json()).toEqual({ id: '1', n: 2 });
    for (const [payload, status, code] of [
      [{ tags: ['a b'] }, 400, 'ECC_BAD_PURGE'],
      [{}, 400, 'ECC_BAD_PURGE'],
      [{ tags: 'a' }, 400, 'ECC_BAD_REQUEST'],
      [{ all: true, extra: 1 }, 400, 'ECC_BAD_REQUEST'],
    ] as const) {
      const r = await app.inject({ method: 'POST', url, headers: auth, payload });
      expect([r.statusCode, r.json().error.code], JSON.stringify(payload)).toEqual([status, code]);
    }
    const unknown = await app.inject({
      method: 'POST',
      url: '/v1/tables/no-such-table/purge',
      headers: auth,
      payload: { all: true },
    });
    expect(unknown.json().error.code).toBe('ECC_UNKNOWN_TABLE');
    const soft = await app.inject({
      method: 'POST',
      url,
      headers: auth,
      payload: { tags: ['x'], soft: true },
    });
    expect(soft.statusCode).toBe(200);
  });
});
