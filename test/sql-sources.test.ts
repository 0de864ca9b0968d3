/**
 * The `postgres` and `mysql` sources, against real servers: one suite run on
 * each kind (rows, batches as one query, start-up checks naming the field, the
 * statement timeout, one bad id isolated, close, the demo seed). Queries and
 * rows are counted in a wrapper around the source's pool, at the database's door.
 */
import mysql from 'mysql2/promise';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { countingMysqlPool, countingPgPool, type PoolCount } from '../harness/counting-pools.js';
import { ConfigError, type EchoStoreError } from '../src/errors.js';
import { buildSource, mysqlSource, postgresSource, type Source } from '../src/sources/index.js';
import type { SqlSourceOptions } from '../src/sources/sql.js';
import { openStore } from './helpers/probe.js';
import { startServiceProcess } from './helpers/service.js';
import {
  mysqlExec,
  mysqlServer,
  pgExec,
  postgresServer,
  type SqlServer,
  uniqueSchema,
  withDatabase,
  withSearchPath,
} from './helpers/sql.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

const ctx = () => ({ signal: new AbortController().signal });
const BIG = '9007199254740993';

/** Counts the queries a source sends and the rows the database answers. */
interface Counted extends PoolCount {
  /** Connections the pool holds now. */
  open(): Promise<number>;
}

interface Kind {
  name: 'postgres' | 'mysql';
  server(): Promise<SqlServer>;
  /** Creates `items(id, name, big)` with rows 1..60 in a fresh schema; its URL and qualified name. */
  setup(url: string): Promise<{ url: string; items: string; drop(): Promise<void> }>;
  /** The list query on `items`, selecting `columns`. */
  query(items: string, columns?: string, where?: string): string;
  sleep(items: string, seconds: number): string;
  /** An `idsQuery` on `items`: the ids, highest first, up to the limit. */
  idsQuery(items: string): string;
  build(options: SqlSourceOptions, loadTimeoutMs: number, counted?: Counted): Promise<Source>;
}

const ROWS = Array.from({ length: 60 }, (_, i) => i + 1);

const postgres: Kind = {
  name: 'postgres',
  server: postgresServer,
  async setup(url) {
    const schema = uniqueSchema();
    await pgExec(
      url,
      `CREATE SCHEMA ${schema}`,
      `CREATE TABLE ${schema}.items (id integer PRIMARY KEY, name text, big bigint)`,
      `INSERT INTO ${schema}.items SELECT i, 'item ' || i, CASE WHEN i = 1 THEN ${BIG} ELSE i END FROM generate_series(1, ${ROWS.length}) AS i`,
    );
    return {
      url: withSearchPath(url, schema),
      items: `${schema}.items`,
      drop: () => pgExec(url, `DROP SCHEMA ${schema} CASCADE`),
    };
  },
  query: (items, columns = 'id, name, big', where = 'id = ANY($1)') =>
    `SELECT ${columns} FROM ${items} WHERE ${where}`,
  sleep: (items, s) => `SELECT id, pg_sleep(${s}) FROM ${items} WHERE id = ANY($1)`,
  idsQuery: (items) => `SELECT id FROM ${items} ORDER BY id DESC LIMIT $1`,
  build(options, loadTimeoutMs, counted) {
    let made: pg.Pool | undefined;
    if (counted !== undefined) counted.open = async () => made?.totalCount ?? 0;
    return postgresSource(options, {
      field: 'tables.items.source',
      loadTimeoutMs,
      makePool: (config) => {
        made = countingPgPool(counted ?? counter())(config);
        return made;
      },
    });
  },
};

const mysqlKind: Kind = {
  name: 'mysql',
  server: mysqlServer,
  async setup(url) {
    const database = uniqueSchema();
    await mysqlExec(url, `CREATE DATABASE ${database}`);
    const own = withDatabase(url, database);
    await mysqlExec(
      own,
      'CREATE TABLE items (id INT PRIMARY KEY, name TEXT, big BIGINT)',
      `INSERT INTO items VALUES ${ROWS.map((i) => `(${i}, 'item ${i}', ${i === 1 ? BIG : i})`).join(', ')}`,
    );
    return { url: own, items: 'items', drop: () => mysqlExec(url, `DROP DATABASE ${database}`) };
  },
  query: (items, columns = 'id, name, big', where = 'id IN (?)') =>
    `SELECT ${columns} FROM ${items} WHERE ${where}`,
  sleep: (items, s) => `SELECT id, SLEEP(${s}) AS s FROM ${items} WHERE id IN (?)`,
  idsQuery: (items) => `SELECT id FROM ${items} ORDER BY id DESC LIMIT ?`,
  build(options, loadTimeoutMs, counted) {
    const database = new URL(options.url).pathname.slice(1);
    if (counted !== undefined) {
      counted.open = async () => {
        const conn = await mysql.createConnection({ uri: options.url });
        const [rows] = await conn.query(
          'SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()',
          [database],
        );
        await conn.end();
        return Number((rows as { n: unknown }[])[0]?.n);
      };
    }
    return mysqlSource(options, {
      field: 'tables.items.source',
      loadTimeoutMs,
      makePool: countingMysqlPool(counted ?? counter()),
    });
  },
};

const counter = (): Counted => ({ queries: 0, rows: 0, open: async () => 0 });

describe.each([postgres, mysqlKind])('$name source', (kind) => {
  let server: SqlServer;
  beforeAll(async () => {
    server = await kind.server();
  });
  afterAll(() => server?.stop());

  /** A fresh schema with `items`, dropped when the test ends. */
  async function fixture() {
    const f = await kind.setup(server.url);
    onTestFinished(() => f.drop());
    return f;
  }

  async function source(options: Partial<SqlSourceOptions> = {}, loadTimeoutMs = 4_000) {
    const f = await fixture();
    const counted = counter();
    const s = await kind.build(
      { url: f.url, query: kind.query(f.items), ...options },
      loadTimeoutMs,
      counted,
    );
    onTestFinished(() => s.close());
    return { f, s, counted };
  }

  it('loads a row it has as a plain object (exact big numbers as text), and undefined for one it lacks', async () => {
    const { s } = await source();
    expect(await s.load('1', ctx())).toEqual({ id: 1, name: 'item 1', big: BIG });
    expect(await s.load('999', ctx())).toBeUndefined();
  });

  it('loads many ids with one query: a map of the rows it has', async () => {
    const { s, counted } = await source();
    const rows = await s.loadMany?.(['2', '3', '999', '4'], ctx());
    expect([...(rows?.keys() ?? [])].sort()).toEqual(['2', '3', '4']);
    expect(rows?.get('3')).toEqual({ id: 3, name: 'item 3', big: '3' });
    expect(counted).toMatchObject({ queries: 1, rows: 3 });
  });

  it('through a store, 200 readers over 50 cold ids cost at most 2 queries and 50 rows', async () => {
    const { s, counted } = await source();
    const table = uniqueTable(`sql-${kind.name}`);
    const store = await openStore({
      [table]: { load: s.load, loadMany: s.loadMany, initialConcurrentLoads: 64 },
    });
    const t = store.table(table);
    const wanted = Array.from({ length: 200 }, (_, i) => String((i % 50) + 1));
    const results = await Promise.all(wanted.map((id) => t.get(id)));
    results.forEach((r, i) => {
      expect(r.found && (r.value as { id: number }).id).toBe(Number(wanted[i]));
    });
    expect(counted.queries).toBeLessThanOrEqual(2);
    expect(counted.rows).toBe(50);
  });

  it('fails a load that runs past loadTimeoutMs on the server (statement timeout)', async () => {
    const f = await fixture();
    const s = await kind.build({ url: f.url, query: kind.sleep(f.items, 2) }, 300);
    onTestFinished(() => s.close());
    const started = performance.now();
    await expect(s.load('1', ctx())).rejects.toThrow(/timeout|max_statement_time|interrupted/i);
    expect(performance.now() - started).toBeLessThan(1_800);
  });

  it('rejects a load at once when its flight is aborted', async () => {
    const f = await fixture();
    const s = await kind.build({ url: f.url, query: kind.sleep(f.items, 1) }, 4_000);
    onTestFinished(() => s.close());
    const controller = new AbortController();
    const reason = new Error('flight gave up');
    const loading = s.load('1', { signal: controller.signal });
    controller.abort(reason);
    await expect(loading).rejects.toBe(reason);
  });

  it('close releases every connection of the pool, and may be called twice', async () => {
    const { s, counted } = await source({ poolSize: 3 });
    await Promise.all([s.loadMany?.(['1'], ctx()), s.loadMany?.(['2'], ctx())]);
    expect(await counted.open()).toBeGreaterThan(0);
    await s.close();
    await s.close();
    // The server notices the closed connections a moment later.
    await vi.waitFor(async () => expect(await counted.open()).toBe(0));
  });

  it('matches rows to ids by idColumn', async () => {
    const f = await fixture();
    const s = await kind.build(
      {
        url: f.url,
        query: kind.query(
          f.items,
          'name AS label, id AS code',
          kind.name === 'postgres' ? 'name = ANY($1)' : 'name IN (?)',
        ),
        idColumn: 'label',
      },
      4_000,
    );
    onTestFinished(() => s.close());
    expect(await s.load('item 7', ctx())).toEqual({ label: 'item 7', code: 7 });
  });

  it('refuses a tagsColumn the query does not return at start-up, naming source.tagsColumn', async () => {
    const f = await fixture();
    const err = await kind
      .build({ url: f.url, query: kind.query(f.items), tagsColumn: 'tags' }, 1_000)
      .catch((e) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).field).toBe('tables.items.source.tagsColumn');
    expect((err as Error).message).toBe(
      'tables.items.source.tagsColumn: the query returns no column "tags"; it returns id, name, big',
    );
    // A column it returns is accepted.
    const s = await kind.build(
      { url: f.url, query: kind.query(f.items), tagsColumn: 'name' },
      1_000,
    );
    onTestFinished(() => s.close());
  });

  describe('refuses a misconfigured query at start-up, naming tables.<name>.source.query', () => {
    const cases: Array<[string, (items: string) => string]> = [
      ['a syntax error', (items) => `SELEC id FROM ${items} WHERE id IN (1)`],
      ['a missing column', (items) => kind.query(items, 'id, nope')],
      ['a missing table', () => kind.query('no_such_table')],
      ['no list parameter', (items) => kind.query(items, 'id', 'id = 1')],
      ['no id column', (items) => kind.query(items, 'name')],
      [
        'a write',
        (items) =>
          kind.name === 'postgres'
            ? `DELETE FROM ${items} WHERE id = ANY($1) RETURNING id`
            : `DELETE FROM ${items} WHERE id IN (?)`,
      ],
    ];
    it.each(cases)('%s', async (_, query) => {
      const f = await fixture();
      const err = await kind.build({ url: f.url, query: query(f.items) }, 1_000).catch((e) => e);
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).field).toBe('tables.items.source.query');
      expect((err as Error).message).toMatch(/^tables\.items\.source\.query: /);
    });

    it('and the rows survive a refused write', async () => {
      const { s } = await source();
      expect(await s.load('5', ctx())).toMatchObject({ id: 5 });
    });
  });

  it('refuses a server it cannot reach at start-up, naming source.url and never the password', async () => {
    const url =
      kind.name === 'postgres'
        ? 'postgres://u:sekret@127.0.0.1:1/test'
        : 'mysql://u:sekret@127.0.0.1:1/test';
    const err = await buildSource(
      { kind: kind.name, url, query: kind.query('items') },
      { field: 'tables.items.source', loadTimeoutMs: 1_000 },
    ).catch((e: unknown) => e as EchoStoreError);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).field).toBe('tables.items.source.url');
    expect((err as Error).message).not.toContain('sekret');
  });

  it('lists ids with idsQuery, most wanted first, as text (warm.top)', async () => {
    const { f, s, counted } = await source();
    expect(s.listIds).toBeUndefined(); // no idsQuery: the source cannot list ids
    const listing = await kind.build(
      { url: f.url, query: kind.query(f.items), idsQuery: kind.idsQuery(f.items) },
      4_000,
      counted,
    );
    onTestFinished(() => listing.close());
    expect(await listing.listIds?.(3)).toEqual(['60', '59', '58']);
    expect(await listing.listIds?.(0)).toEqual([]);
  });

  it('refuses an idsQuery that does not take the limit, naming source.idsQuery', async () => {
    const f = await fixture();
    const err = await kind
      .build(
        { url: f.url, query: kind.query(f.items), idsQuery: `SELECT id FROM ${f.items}` },
        1_000,
      )
      .catch((e) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).field).toBe('tables.items.source.idsQuery');
  });

  it('warms its top ids at start-up (warm.top), with the listing in the log', async () => {
    const f = await fixture();
    const table = uniqueTable('sql-top');
    const service = await startServiceProcess({
      valkey: { url: valkeyUrl() },
      tables: {
        [table]: {
          source: {
            kind: kind.name,
            url: f.url,
            query: kind.query(f.items),
            idsQuery: kind.idsQuery(f.items),
          },
          warm: { top: 4 },
        },
      },
    });
    await vi.waitFor(
      () => expect(service.logs().some((l) => l.msg === 'warm-up done')).toBe(true),
      {
        timeout: 45_000,
        interval: 50,
      },
    );
    expect(
      service.logs().find((l) => l.msg === 'warm-up: the source listed its top ids'),
    ).toMatchObject({ table, top: 4, listed: 4 });
    expect(service.logs().find((l) => l.msg === 'warm-up done')).toMatchObject({
      table,
      warmed: 4,
    });
    const r = await fetch(`${service.url}/v1/tables/${table}/items/57`);
    expect(r.headers.get('cache-status')).toMatch(/detail=l1$/); // warmed: no load on this read
  }, 60_000); // a service start and a warm-up under a loaded suite

  it('seeds the demo catalog once when asked: product 42 as in the sqlite demo', async () => {
    const f = await fixture();
    const query =
      kind.name === 'postgres'
        ? 'SELECT id, sku, name, category, price_cents, stock, description FROM products WHERE id = ANY($1)'
        : 'SELECT id, sku, name, category, price_cents, stock, description FROM products WHERE id IN (?)';
    const first = await kind.build({ url: f.url, query, seed: 'demo' }, 4_000);
    await first.close();
    const counted = counter();
    const again = await kind.build({ url: f.url, query, seed: 'demo' }, 4_000, counted);
    onTestFinished(() => again.close());
    expect(await again.load('42', ctx())).toEqual({
      id: 42,
      sku: 'SKU-000042',
      name: 'Compact Mug',
      category: 'kitchen',
      price_cents: 11113,
      stock: 461,
      description: 'Compact Mug made of steel, from our kitchen range.',
    });
    const all = await again.loadMany?.(['1', '10000', '10001'], ctx());
    expect([...(all?.keys() ?? [])].sort()).toEqual(['1', '10000']);
  });
});

describe('postgres source: one bad id among good ones', () => {
  let server: SqlServer;
  beforeAll(async () => {
    server = await postgresServer();
  });
  afterAll(() => server?.stop());

  it('answers an id the integer column cannot take with ECC_BAD_ID, and the others with their rows', async () => {
    const f = await postgres.setup(server.url);
    onTestFinished(() => f.drop());
    const s = await postgres.build({ url: f.url, query: postgres.query(f.items) }, 4_000);
    onTestFinished(() => s.close());
    const table = uniqueTable('sql-bad-id');
    const store = await openStore({ [table]: { load: s.load, loadMany: s.loadMany } });
    const entries = await store.table(table).getMany(['1', 'abc', '99999999999', '2', '404']);
    expect(
      entries.map((e) => (e.ok ? (e.result.found ? 'found' : 'not_found') : e.error.code)),
    ).toEqual(['found', 'ECC_BAD_ID', 'ECC_BAD_ID', 'found', 'not_found']);
  });
});
