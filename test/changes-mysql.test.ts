/**
 * Invalidation from MariaDB's row binlog, against a private mariadbd
 * (harness/mariadb-server.ts) and the test Valkey: changes made directly in
 * the database reach the cache, the position is kept in Valkey, and a new
 * reader resumes from it without losing what was committed meanwhile.
 */
import { randomBytes } from 'node:crypto';
import { type AddressInfo, createServer } from 'node:net';
import mysql from 'mysql2/promise';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { type PrivateMariadb, startMariadb } from '../harness/mariadb-server.js';
import { startService } from '../harness/service.js';
import { followMysql, tableTarget } from '../src/changes/follow.js';
import type { ChangeFollower } from '../src/changes/follower.js';
import { changeMetrics } from '../src/changes/metrics.js';
import { truncatedTable } from '../src/changes/mysql-stream.js';
import type { Store } from '../src/store/store.js';
import { openStore, scopedValkey } from './helpers/probe.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

let db: PrivateMariadb;
let admin: mysql.Pool;

beforeAll(async () => {
  db = await startMariadb();
  admin = mysql.createPool({ uri: db.url, connectionLimit: 2 });
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await db?.stop();
});

async function itemsTable(): Promise<string> {
  const name = `items_${randomBytes(4).toString('hex')}`;
  await admin.query(`CREATE TABLE ${name} (id integer PRIMARY KEY, version integer NOT NULL)`);
  await admin.query(`INSERT INTO ${name} VALUES (1, 1), (2, 1), (3, 1)`);
  return name;
}

const loaderOf = (name: string) => async (id: string) => {
  const [rows] = await admin.query(`SELECT id, version FROM ${name} WHERE id = ?`, [Number(id)]);
  return (rows as unknown[])[0];
};

async function follow(
  store: Store,
  table: string,
  name: string,
  stream: string,
): Promise<ChangeFollower> {
  const follower = await followMysql(
    table,
    { url: db.url, idColumn: 'id' },
    { stream, tables: [{ table: name, idColumn: 'id' }], leaseMs: 600 },
    tableTarget(store.table(table)),
    {
      valkey: store.valkey,
      metrics: changeMetrics(new Registry()),
      log: pino({ level: 'silent' }),
      namespace: store.namespace,
    },
  );
  onTestFinished(() => follower.close());
  return follower;
}

const versionOf = async (store: Store, table: string, id: string) => {
  const r = await store.table(table).get(id);
  return r.found ? (r.value as { version: number }).version : undefined;
};

describe("invalidation from MariaDB's binlog", () => {
  it('an UPDATE, a DELETE and an INSERT made in the database reach the cache', async () => {
    const name = await itemsTable();
    const table = uniqueTable('my-follow');
    const a = await openStore({
      [table]: { load: loaderOf(name), ttlMs: 600_000, negativeTtlMs: 600_000 },
    });
    const fa = await follow(a, table, name, `s_${name}`);
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    for (const id of ['1', '2', '4']) await a.table(table).get(id);
    await admin.query(`UPDATE ${name} SET version = 2 WHERE id = 1`);
    await admin.query(`DELETE FROM ${name} WHERE id = 2`);
    await admin.query(`INSERT INTO ${name} VALUES (4, 5)`);
    await vi.waitFor(
      async () => {
        expect(await versionOf(a, table, '1')).toBe(2);
        expect(await versionOf(a, table, '2')).toBeUndefined();
        expect(await versionOf(a, table, '4')).toBe(5);
      },
      { timeout: 10_000, interval: 20 },
    );
  }, 30_000);

  it('keeps its position in Valkey: a new reader resumes there and loses nothing committed meanwhile', async () => {
    const name = await itemsTable();
    const table = uniqueTable('my-resume');
    const stream = `s_${name}`;
    const raw = scopedValkey();
    const a = await openStore({ [table]: { load: loaderOf(name), ttlMs: 600_000 } });
    const first = await follow(a, table, name, stream);
    // The binlog's end when it started, saved before its first run.
    const pinned = await raw.get(`ecc:changes:{${stream}}:binlog`);
    expect(pinned).toMatch(/^binlog\.\d+:\d+$/);
    await vi.waitFor(() => expect(first.reading).toBe(true), { timeout: 10_000 });
    await admin.query(`UPDATE ${name} SET version = 2 WHERE id = 3`);
    // Saved once the invalidation is applied; then the read below caches version 2 in L1.
    const saved = await vi.waitFor(async () => {
      const text = await raw.get(`ecc:changes:{${stream}}:binlog`);
      expect(text).toMatch(/^binlog\.\d+:\d+$/);
      expect(text).not.toBe(pinned);
      return text;
    });
    expect(await versionOf(a, table, '3')).toBe(2);
    await first.close();
    // Committed while nobody reads.
    await admin.query(`UPDATE ${name} SET version = 3 WHERE id = 3`);
    const cached = await a.table(table).get('3');
    expect({
      layer: cached.layer,
      version: cached.found && (cached.value as { version: number }).version,
    }).toEqual({ layer: 'l1', version: 2 });
    const second = await follow(a, table, name, stream);
    await vi.waitFor(async () => expect(await versionOf(a, table, '3')).toBe(3), {
      timeout: 10_000,
      interval: 20,
    });
    expect(second.reading).toBe(true);
    expect(await raw.get(`ecc:changes:{${stream}}:binlog`)).not.toBe(saved);
  }, 30_000);

  it('reads from where the binlog was when it started: a commit made before its first run is not skipped', async () => {
    const name = await itemsTable();
    const table = uniqueTable('my-pin');
    const a = await openStore({ [table]: { load: loaderOf(name), ttlMs: 600_000 } });
    expect(await versionOf(a, table, '1')).toBe(1);
    const fa = await follow(a, table, name, `p_${name}`);
    // Committed before the follower's first run (an instance takes a free lease at its second look).
    expect(fa.reading).toBe(false);
    await admin.query(`UPDATE ${name} SET version = 2 WHERE id = 1`);
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    await vi.waitFor(async () => expect(await versionOf(a, table, '1')).toBe(2), {
      timeout: 10_000,
      interval: 20,
    });
  }, 30_000);

  it('a database that accepts and never answers does not hold the start: the follower starts within seconds', async () => {
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => {
      silent.close();
    });
    const { port } = silent.address() as AddressInfo;
    const table = uniqueTable('my-silent');
    const a = await openStore({ [table]: { load: () => undefined } });
    const started = performance.now();
    const follower = await followMysql(
      table,
      { url: `mysql://root@127.0.0.1:${port}/test`, idColumn: 'id' },
      { stream: `silent_${randomBytes(4).toString('hex')}`, leaseMs: 600 },
      { invalidate: async () => {}, truncate: async () => {} },
      {
        valkey: a.valkey,
        metrics: changeMetrics(new Registry()),
        log: pino({ level: 'silent' }),
        namespace: a.namespace,
      },
    );
    await follower.close();
    expect(performance.now() - started).toBeLessThan(8_000);
  }, 30_000);

  it('is configured on a mysql source with follow, and the service invalidates from it', async () => {
    const name = await itemsTable();
    const cache = uniqueTable('my-svc');
    const service = await startService({
      valkey: { url: valkeyUrl() },
      tables: {
        [cache]: {
          ttlMs: 600_000,
          source: {
            kind: 'mysql',
            url: db.url,
            query: `SELECT id, version FROM ${name} WHERE id IN (?)`,
            follow: { stream: `svc_${name}`, tables: [{ table: name, idColumn: 'id' }] },
          },
        },
      },
    });
    onTestFinished(() => service.stop());
    const get = async () =>
      (
        (await (await fetch(`${service.url}/v1/tables/${cache}/items/1`)).json()) as {
          version: number;
        }
      ).version;
    await vi.waitFor(
      async () => {
        const text = await (await fetch(`${service.url}/metrics`)).text();
        expect(text).toMatch(new RegExp(`echostore_changes_holder\\{stream="svc_${name}"\\} 1`));
      },
      { timeout: 20_000, interval: 100 },
    );
    expect(await get()).toBe(1);
    await admin.query(`UPDATE ${name} SET version = 9 WHERE id = 1`);
    await vi.waitFor(async () => expect(await get()).toBe(9), { timeout: 10_000, interval: 20 });
  }, 60_000);
});

describe('TRUNCATE of a watched table (a statement in the binlog)', () => {
  it('purges every cached row of the table', async () => {
    const name = await itemsTable();
    const table = uniqueTable('my-trunc');
    const a = await openStore({
      [table]: { load: loaderOf(name), ttlMs: 600_000, negativeTtlMs: 600_000 },
    });
    const fa = await follow(a, table, name, `t_${name}`);
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    for (const id of ['1', '2', '3']) expect(await versionOf(a, table, id)).toBe(1);
    await admin.query(`TRUNCATE TABLE ${name}`);
    await vi.waitFor(
      async () => {
        for (const id of ['1', '2', '3']) expect(await versionOf(a, table, id)).toBeUndefined();
      },
      { timeout: 10_000, interval: 20 },
    );
  }, 30_000);

  it('names the table a TRUNCATE statement names, qualified or not', () => {
    expect(truncatedTable({ query: 'TRUNCATE TABLE items', schema: 'test' })).toBe('test.items');
    expect(truncatedTable({ query: 'truncate `shop`.`items`;', schema: 'test' })).toBe(
      'shop.items',
    );
    expect(truncatedTable({ query: 'BEGIN', schema: 'test' })).toBeUndefined();
    expect(truncatedTable({ query: 'DELETE FROM items', schema: 'test' })).toBeUndefined();
  });
});
