/**
 * Read-your-writes over MariaDB's row binlog, through the real service: a
 * GET with `Echostore-Min-Binlog: <File>:<Position>` (what `SHOW MASTER
 * STATUS` prints right after the client's commit) answers the written
 * version or newer, and says in Cache-Status whether the stream had passed
 * the position (`ryw=stream`) or the source answered (`ryw=source`).
 * Against a private mariadbd with the row binlog on and the test Valkey.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type PrivateMariadb, startMariadb } from '../harness/mariadb-server.js';
import { type Service, startService } from '../harness/service.js';
import { readItem } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

let db: PrivateMariadb;
let admin: mysql.Pool;
let service: Service;
let name: string;
/** The cache tables' names, unique per run (test files share one Valkey). */
const items = uniqueTable('ryw-my');
const impatient = uniqueTable('ryw-my-impatient');
const plain = uniqueTable('ryw-my-plain');

beforeAll(async () => {
  db = await startMariadb();
  admin = mysql.createPool({ uri: db.url, connectionLimit: 2 });
  name = `ryw_${randomBytes(4).toString('hex')}`;
  await admin.query(`CREATE TABLE ${name} (id integer PRIMARY KEY, version integer NOT NULL)`);
  await admin.query(
    `INSERT INTO ${name} VALUES ${Array.from({ length: 10 }, (_, i) => `(${i + 1}, 1)`).join(', ')}`,
  );
  const query = `SELECT id, version FROM ${name} WHERE id IN (?)`;
  const source = (waitMs: number) => ({
    ttlMs: 600_000,
    source: {
      kind: 'mysql',
      url: db.url,
      query,
      follow: {
        stream: `${name}_${waitMs}`,
        tables: [{ table: name, idColumn: 'id' }],
        readYourWritesWaitMs: waitMs,
      },
    },
  });
  service = await startService({
    valkey: { url: valkeyUrl() },
    tables: {
      [items]: source(1_000),
      [impatient]: source(0),
      [plain]: { source: { kind: 'mysql', url: db.url, query } },
    },
  });
  // Both streams read the binlog before the first commit of a test.
  await vi.waitFor(
    async () => {
      const text = await (await fetch(`${service.url}/metrics`)).text();
      expect(text.match(/echostore_changes_holder\{stream="ryw_[0-9a-f]+_\d+"\} 1/g)).toHaveLength(
        2,
      );
    },
    { timeout: 20_000, interval: 100 },
  );
}, 120_000);

afterAll(async () => {
  await service?.stop();
  await admin?.end();
  await db?.stop();
});

/** Commits `sql` and returns the position a client would pass: `SHOW MASTER STATUS` right after. */
async function commit(sql: string, values: unknown[] = []): Promise<string> {
  await admin.query(sql, values);
  const [rows] = await admin.query('SHOW MASTER STATUS');
  const row = (rows as Array<{ File: string; Position: number }>)[0];
  return `${row?.File}:${row?.Position}`;
}

const get = (table: string, id: number, position?: string) =>
  readItem(
    service.url,
    table,
    id,
    position === undefined ? {} : { 'echostore-min-binlog': position },
  );

describe('read-your-writes (MySQL/MariaDB binlog position)', () => {
  it('every read after a commit, given its binlog position, returns the written version or newer', async () => {
    const written: number[] = [];
    const read: number[] = [];
    const via: string[] = [];
    for (let n = 2; n <= 41; n++) {
      const id = 1 + (n % 3);
      // Cached first, so a plain read would be an L1 hit of the old version.
      await get(items, id);
      const position = await commit(`UPDATE ${name} SET version = ? WHERE id = ?`, [n, id]);
      const answer = await get(items, id, position);
      expect(answer.status).toBe(200);
      written.push(n);
      read.push(answer.body.version as number);
      via.push(/; ryw=(stream|source)$/.exec(answer.cacheStatus)?.[1] ?? answer.cacheStatus);
    }
    expect(read.every((v, i) => v >= (written[i] as number))).toBe(true);
    // The stream passes the client's position well within the wait: no read went to the source.
    expect(via.filter((v) => v !== 'stream')).toEqual([]);
  }, 60_000);

  it('says ryw=stream when the stream passed the position within the wait', async () => {
    await get(items, 5);
    const position = await commit(`UPDATE ${name} SET version = version + 1 WHERE id = 5`);
    const [rows] = await admin.query(`SELECT version FROM ${name} WHERE id = 5`);
    const answer = await get(items, 5, position);
    expect(answer.body.version).toBe((rows as Array<{ version: number }>)[0]?.version);
    expect(answer.cacheStatus).toMatch(/; ryw=stream$/);
    // One client's answer, kept out of shared caches; every answer of the table varies on the header.
    expect({ cacheControl: answer.cacheControl, vary: answer.vary }).toEqual({
      cacheControl: 'no-store',
      vary: 'echostore-min-binlog',
    });
    expect((await get(items, 5)).vary).toBe('echostore-min-binlog');
  });

  it('orders positions across binlog files: after FLUSH BINARY LOGS a commit in the new file is passed too', async () => {
    const [before] = (await commit(`UPDATE ${name} SET version = version + 1 WHERE id = 4`)).split(
      ':',
    );
    await admin.query('FLUSH BINARY LOGS');
    await get(items, 4);
    const position = await commit(`UPDATE ${name} SET version = 77 WHERE id = 4`);
    expect(position.split(':')[0]).not.toBe(before);
    const answer = await get(items, 4, position);
    expect(answer.body.version).toBe(77);
    expect(answer.cacheStatus).toMatch(/; ryw=stream$/);
  });

  it('says ryw=source when the stream has not reached the position in time, and reads the source', async () => {
    await get(impatient, 6);
    const position = await commit(`UPDATE ${name} SET version = 99 WHERE id = 6`);
    // A position far ahead of the server's (a later binlog file): no stream reaches it.
    const ahead = position.replace(
      /\.(\d+):/,
      (_, seq: string) => `.${String(Number(seq) + 1).padStart(seq.length, '0')}:`,
    );
    const answer = await get(impatient, 6, ahead);
    expect(answer.body.version).toBe(99);
    expect(answer.cacheStatus).toMatch(/^echostore; fwd=miss; fwd-status=200; ttl=0; ryw=source$/);
  });

  it('refuses a malformed position, an LSN on a mysql table, or a table that follows no stream, with ECC_BAD_REQUEST', async () => {
    for (const [table, headers] of [
      [items, { 'echostore-min-binlog': 'not-a-position' }],
      [items, { 'echostore-min-lsn': '0/0' }],
      [plain, { 'echostore-min-binlog': 'binlog.000001:4' }],
    ] as const) {
      const r = await fetch(`${service.url}/v1/tables/${table}/items/1`, { headers });
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('ECC_BAD_REQUEST');
    }
  });
});
