import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EchoStoreError } from '../src/errors.js';
import { leaseKey, valueKey } from '../src/l2/keys.js';
import {
  buildSource,
  ensureDemoCatalog,
  httpSource,
  SourceError,
  sqliteSource,
} from '../src/sources/index.js';
import { openStore, scopedValkey } from './helpers/probe.js';
import { itemsDb } from './helpers/sqlite-fixture.js';
import { uniqueTable } from './helpers/store.js';

const ctx = () => ({ signal: new AbortController().signal });

/** Runs `fn` and returns what it threw (sync throw or rejection). */
async function caught(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected a failure');
}

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'echostore-sources-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('sqlite source', () => {
  it.each(['@id', ':id', '$id'])('binds the id to the named parameter %s', async (param) => {
    const file = itemsDb();
    const source = sqliteSource({ file, query: `SELECT label FROM items WHERE id = ${param}` });
    expect(await source.load('b', ctx())).toEqual({ label: 'second' });
    source.close();
  });

  it('rejects with the SQLite error when the query fails at load time', async () => {
    const file = itemsDb();
    const source = sqliteSource({ file, query: 'SELECT json(doc) AS doc FROM items WHERE id = ?' });
    expect(await source.load('a', ctx())).toEqual({ doc: '{"ok":true}' });
    const err = await caught(() => source.load('b', ctx()));
    expect((err as { code?: string }).code).toBe('SQLITE_ERROR');
    source.close();
  });

  it('refuses at start a query that writes, even one that returns rows', async () => {
    const file = itemsDb();
    const err = await caught(() =>
      sqliteSource({ file, query: "UPDATE items SET label = 'x' WHERE id = ? RETURNING *" }),
    );
    expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
  });

  it.each([
    ['no parameter', 'SELECT * FROM items'],
    ['two positional parameters', 'SELECT * FROM items WHERE id = ? OR label = ?'],
    ['a named parameter other than id', 'SELECT * FROM items WHERE id = @key'],
    ['id and another named parameter', 'SELECT * FROM items WHERE id = @id OR label = @label'],
    ['a numbered parameter', 'SELECT * FROM items WHERE id = ?2'],
    ['a syntax error', 'SELEC * FROM items WHERE id = ?'],
    ['a statement that returns no rows', 'DELETE FROM items WHERE id = ?'],
    ['an unknown table', 'SELECT * FROM nope WHERE id = ?'],
  ])('rejects a query with %s as ECC_BAD_CONFIG naming source.query', async (_, query) => {
    const file = itemsDb();
    const err = await caught(() => sqliteSource({ file, query }));
    expect(err).toBeInstanceOf(EchoStoreError);
    expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
    expect((err as Error).message).toContain('source.query');
  });

  it('rejects a file that does not exist as ECC_BAD_CONFIG naming source.file', async () => {
    const err = await caught(() =>
      sqliteSource({ file: join(dir, 'absent.sqlite'), query: 'SELECT 1 WHERE ? = 1' }),
    );
    expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
    expect((err as Error).message).toContain('source.file');
  });

  it('names the configuration path it is given', async () => {
    const err = await caught(() =>
      buildSource(
        { kind: 'sqlite', file: itemsDb(), query: 'SELECT 1' },
        { field: 'tables.items.source', loadTimeoutMs: 1_000 },
      ),
    );
    expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
    expect((err as Error).message).toContain('tables.items.source.query');
  });
});

describe('demo catalog', () => {
  const query = 'SELECT * FROM products WHERE id = ?';
  const product42 = {
    id: 42,
    sku: 'SKU-000042',
    name: 'Compact Mug',
    category: 'kitchen',
    price_cents: 11113,
    stock: 461,
    description: 'Compact Mug made of steel, from our kitchen range.',
  };

  function count(file: string): number {
    const db = new Database(file, { readonly: true });
    const { n } = db.prepare('SELECT count(*) AS n FROM products').get() as { n: number };
    db.close();
    return n;
  }

  it('refuses at start a query that writes behind a CTE (it returns rows, but is not read-only)', async () => {
    const file = itemsDb();
    const err = await caught(() =>
      sqliteSource({
        file,
        query: 'WITH x AS (SELECT 1) UPDATE items SET name = name WHERE id = ? RETURNING *',
      }),
    );
    expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
  });

  it('creates 10,000 products, the same on every machine', async () => {
    const file = join(dir, 'demo', 'nested', 'catalog.sqlite');
    const source = sqliteSource({ file, query, seed: 'demo' });
    expect(await source.load('42', ctx())).toEqual(product42);
    expect(await source.load('10000', ctx())).toMatchObject({ id: 10000, sku: 'SKU-010000' });
    expect(await source.load('10001', ctx())).toBeUndefined();
    source.close();
    expect(count(file)).toBe(10_000);
  });

  it('gives a product the same row whatever the catalog size', async () => {
    const small = join(dir, 'demo-small.sqlite');
    ensureDemoCatalog(small, 50);
    expect(count(small)).toBe(50);
    const source = sqliteSource({ file: small, query });
    expect(await source.load('42', ctx())).toEqual(product42);
    source.close();
  });

  it('leaves an existing catalog alone on a second call', async () => {
    const file = join(dir, 'demo-twice.sqlite');
    ensureDemoCatalog(file, 100);
    const db = new Database(file);
    db.prepare("UPDATE products SET name = 'edited' WHERE id = 1").run();
    db.close();
    ensureDemoCatalog(file, 100);
    ensureDemoCatalog(file);
    expect(count(file)).toBe(100);
    const source = sqliteSource({ file, query: 'SELECT name FROM products WHERE id = ?' });
    expect(await source.load('1', ctx())).toEqual({ name: 'edited' });
    source.close();
  });
});

/** Writes 64 KiB chunks of JSON-ish filler until the client goes away; resolves `closed` then. */
function streamForever(res: ServerResponse, closed: () => void): void {
  const chunk = Buffer.alloc(64 * 1024, 0x20);
  res.write('[');
  const timer = setInterval(() => res.write(chunk), 1);
  res.on('close', () => {
    clearInterval(timer);
    closed();
  });
}

describe('http source', () => {
  let server: Server;
  let base: string;
  const seen: IncomingMessage[] = [];
  /** Resolved when the origin sees the connection of a streamed (oversized) body close. */
  let streamClosed: Promise<void> = Promise.resolve();
  let onStreamClosed: () => void = () => {};
  const EXACT_BODY = JSON.stringify({ filler: 'x'.repeat(100) });

  beforeAll(async () => {
    server = createServer((req, res) => {
      seen.push(req);
      const id = new URL(req.url ?? '/', 'http://origin').pathname.split('/').at(-1) ?? '';
      const json = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (id === 'missing') return json(404, { error: 'no such item' });
      if (id === 'broken') return json(500, { error: 'boom' });
      if (id === 'html') {
        res.writeHead(200, { 'content-type': 'text/html' });
        return res.end('<html>not json</html>');
      }
      if (id === 'slow') return; // never answers; the client must give up
      if (id === 'null') return json(200, null);
      if (id === 'moved') {
        res.writeHead(302, { location: '/items/42' });
        return res.end();
      }
      if (id === 'exact') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(EXACT_BODY);
      }
      if (id === 'endless') {
        // chunked: no content-length, the size is only known by counting
        res.writeHead(200, { 'content-type': 'application/json' });
        return streamForever(res, onStreamClosed);
      }
      if (id === 'declared-huge') {
        // announces 1 GiB, sends a little, then stalls: only content-length can refuse it in time
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': String(1024 * 1024 * 1024),
        });
        res.write('[');
        return;
      }
      json(200, { id: decodeURIComponent(id), path: req.url });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('returns null, not "not found", for a 200 whose body is JSON null', async () => {
    const source = httpSource({ url: `${base}/items/{id}` });
    expect(await source.load('null', ctx())).toBeNull();
  });

  it('throws a SourceError with the status for a 500', async () => {
    const source = httpSource({ url: `${base}/items/{id}` });
    const err = await caught(() => source.load('broken', ctx()));
    expect(err).toBeInstanceOf(SourceError);
    expect((err as SourceError).status).toBe(500);
  });

  it('throws when a 200 body is not JSON', async () => {
    const source = httpSource({ url: `${base}/items/{id}` });
    const err = await caught(() => source.load('html', ctx()));
    expect(err).toBeInstanceOf(SourceError);
    expect((err as SourceError).cause).toBeInstanceOf(SyntaxError);
  });

  it('gives up on a slow origin after timeoutMs', async () => {
    const source = httpSource({ url: `${base}/items/{id}`, timeoutMs: 200 });
    const started = performance.now();
    const err = await caught(() => source.load('slow', ctx()));
    const elapsedMs = performance.now() - started;
    expect(err).toBeInstanceOf(SourceError);
    expect((err as SourceError).status).toBeUndefined();
    expect(elapsedMs).toBeGreaterThanOrEqual(150);
    expect(elapsedMs).toBeLessThan(2_000);
  });

  it('URL-encodes the id', async () => {
    const source = httpSource({ url: `${base}/items/{id}` });
    expect(await source.load('a/b c', ctx())).toEqual({ id: 'a/b c', path: '/items/a%2Fb%20c' });
  });

  it('sends the configured headers', async () => {
    const source = httpSource({ url: `${base}/items/{id}`, headers: { 'x-api-key': 'k1' } });
    seen.length = 0;
    await source.load('7', ctx());
    expect(seen[0]?.headers['x-api-key']).toBe('k1');
    expect(seen[0]?.headers.accept).toBe('application/json');
  });

  it.each([
    ['a URL without {id}', 'http://127.0.0.1/items'],
    ['a non-http URL', 'ftp://127.0.0.1/items/{id}'],
    ['a malformed URL', 'http://[/{id}'],
  ])('rejects %s as ECC_BAD_CONFIG naming source.url', async (_, url) => {
    const err = await caught(() => httpSource({ url }));
    expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
    expect((err as Error).message).toContain('source.url');
  });

  it('builds an http source from its configuration', async () => {
    const source = await buildSource(
      { kind: 'http', url: `${base}/items/{id}` },
      { loadTimeoutMs: 1_000 },
    );
    expect(await source.load('9', ctx())).toEqual({ id: '9', path: '/items/9' });
  });

  it.each(['.', '..', '%2e', '%2E%2e', '.%2e', '%2e.'])(
    'rejects the dot-segment id %s as ECC_BAD_ID without a request',
    async (id) => {
      const source = httpSource({ url: `${base}/items/{id}` });
      seen.length = 0;
      const err = await caught(() => source.load(id, ctx()));
      expect((err as EchoStoreError).code).toBe('ECC_BAD_ID');
      expect(seen).toHaveLength(0);
    },
  );

  it('a store over an http source refuses a dot-segment id at every entry before Valkey: no lease, no fill, the load limit intact', async () => {
    const source = httpSource({ url: `${base}/items/{id}` });
    const table = uniqueTable('dots');
    const raw = scopedValkey();
    const store = await openStore({
      [table]: { load: source.load, ...(source.checkId ? { checkId: source.checkId } : {}) },
    });
    const t = store.table(table);
    seen.length = 0;
    for (const attempt of [() => t.get('..'), () => t.put('..', 1), () => t.invalidate('.')]) {
      expect(((await caught(attempt)) as EchoStoreError).code).toBe('ECC_BAD_ID');
    }
    expect(seen).toHaveLength(0);
    expect(await raw.exists(leaseKey(table, '..'), valueKey(table, '..'))).toBe(0);
    expect(t.stats()).toMatchObject({ loads: 0, load_limit: 16 });
  });

  it('loads ids that only contain dots', async () => {
    const source = httpSource({ url: `${base}/items/{id}` });
    expect(await source.load('...', ctx())).toEqual({ id: '...', path: '/items/...' });
    expect(await source.load('.a', ctx())).toEqual({ id: '.a', path: '/items/.a' });
  });

  it('fails a redirect instead of following it to another id', async () => {
    const source = httpSource({ url: `${base}/items/{id}` });
    seen.length = 0;
    const err = await caught(() => source.load('moved', ctx()));
    expect(err).toBeInstanceOf(SourceError);
    expect(seen.map((req) => req.url)).toEqual(['/items/moved']);
  });

  it('reads a body of exactly maxBodyBytes and refuses one byte more', async () => {
    const bytes = Buffer.byteLength(EXACT_BODY);
    const fits = httpSource({ url: `${base}/items/{id}`, maxBodyBytes: bytes });
    expect(await fits.load('exact', ctx())).toEqual(JSON.parse(EXACT_BODY));
    const tight = httpSource({ url: `${base}/items/{id}`, maxBodyBytes: bytes - 1 });
    const err = await caught(() => tight.load('exact', ctx()));
    expect(err).toBeInstanceOf(SourceError);
    expect((err as SourceError).status).toBe(200);
  });

  it.each([
    ['maxBodyBytes: 100000', 100_000],
    ['the 8 MiB default', undefined],
  ])(
    'stops reading a chunked body over %s and closes the connection',
    async (_, maxBodyBytes) => {
      streamClosed = new Promise((resolve) => {
        onStreamClosed = resolve;
      });
      const source = httpSource({ url: `${base}/items/{id}`, timeoutMs: 20_000, maxBodyBytes });
      const started = performance.now();
      const err = await caught(() => source.load('endless', ctx()));
      expect(err).toBeInstanceOf(SourceError);
      expect((err as SourceError).status).toBe(200);
      expect(performance.now() - started).toBeLessThan(10_000);
      await streamClosed;
    },
    15_000,
  );

  it('refuses a body whose content-length exceeds maxBodyBytes without waiting for it', async () => {
    const source = httpSource({ url: `${base}/items/{id}`, timeoutMs: 5_000 });
    const started = performance.now();
    const err = await caught(() => source.load('declared-huge', ctx()));
    expect(err).toBeInstanceOf(SourceError);
    expect((err as SourceError).status).toBe(200);
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  describe('keeps the query string and credentials out of error messages', () => {
    const secret = 's3cret-api-key';
    const cases: Array<[string, string, number | undefined]> = [
      ['a 500', 'broken', 500],
      ['a body that is not JSON', 'html', 200],
      ['a redirect', 'moved', undefined],
      ['a body over maxBodyBytes', 'exact', 200],
      ['a timeout', 'slow', undefined],
    ];
    it.each(cases)('for %s', async (_, id, status) => {
      const source = httpSource({
        url: `${base}/items/{id}?api_key=${secret}`,
        timeoutMs: 200,
        maxBodyBytes: 10,
      });
      const err = await caught(() => source.load(id, ctx()));
      expect(err).toBeInstanceOf(SourceError);
      expect((err as SourceError).status).toBe(status);
      expect((err as Error).message).toContain(`GET ${base}/items/${id} `);
      expect((err as Error).message).not.toContain(secret);
      expect((err as SourceError).url).toBe(`${base}/items/${id}`);
    });

    it('for a refused connection', async () => {
      const closed = createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const port = (closed.address() as AddressInfo).port;
      await new Promise((resolve) => closed.close(resolve));
      const source = httpSource({ url: `http://127.0.0.1:${port}/u/{id}?api_key=${secret}` });
      const err = await caught(() => source.load('1', ctx()));
      expect(err).toBeInstanceOf(SourceError);
      expect((err as Error).message).toContain(`GET http://127.0.0.1:${port}/u/1 failed`);
      expect((err as Error).message).not.toContain(secret);
    });

    it('by refusing a URL with user:password@ at construction', async () => {
      const err = await caught(() =>
        httpSource({ url: `http://user:${secret}@127.0.0.1/items/{id}` }),
      );
      expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
      expect((err as Error).message).toContain('source.url');
      expect((err as Error).message).not.toContain(secret);
    });
  });

  it.each([
    ['a CR LF in a value', { 'x-api-key': 'k\r\nx-injected: 1' }, 'source.headers.x-api-key'],
    ['a NUL in a value', { 'x-api-key': 'k\0' }, 'source.headers.x-api-key'],
    ['a name that is not a token', { 'x key': 'k' }, 'source.headers.x key'],
  ])('rejects headers with %s as ECC_BAD_CONFIG naming the header', async (_, headers, field) => {
    const err = await caught(() => httpSource({ url: `${base}/items/{id}`, headers }));
    expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
    expect((err as Error).message).toContain(`${field}:`);
  });

  it.each([0, 1.5, 1024 * 1024 * 1024 + 1])(
    'rejects maxBodyBytes %s as ECC_BAD_CONFIG naming source.maxBodyBytes',
    async (maxBodyBytes) => {
      const err = await caught(() => httpSource({ url: `${base}/items/{id}`, maxBodyBytes }));
      expect((err as EchoStoreError).code).toBe('ECC_BAD_CONFIG');
      expect((err as Error).message).toContain('source.maxBodyBytes:');
    },
  );
});
