/**
 * Read-your-writes over the change stream, through the real service: a GET
 * with `Echostore-Min-Lsn` (the client's `pg_current_wal_lsn()` after its
 * COMMIT) answers the written version or newer, and says in Cache-Status
 * whether the stream had passed the position (`ryw=stream`) or the source
 * answered (`ryw=source`). Against a private Postgres and the test Valkey.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type PrivatePostgres, startPostgres } from '../harness/postgres-server.js';
import { type Service, startService } from '../harness/service.js';
import { spawnValkey } from '../harness/valkey-server.js';
import { parseLsn } from '../src/changes/lsn.js';
import { StreamPosition } from '../src/changes/position.js';
import { ReadAfter } from '../src/changes/read-your-writes.js';
import { openStore } from './helpers/probe.js';
import { readItem } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

let db: PrivatePostgres;
let admin: pg.Pool;
let service: Service;
let name: string;
/** The cache tables' names, unique per run (test files share one Valkey). */
const items = uniqueTable('ryw');
const impatient = uniqueTable('ryw-impatient');
const plain = uniqueTable('ryw-plain');
const stale = uniqueTable('ryw-stale');

beforeAll(async () => {
  db = await startPostgres();
  admin = new pg.Pool({ connectionString: db.url, max: 2 });
  name = `ryw_${randomBytes(4).toString('hex')}`;
  await admin.query(`CREATE TABLE ${name} (id integer PRIMARY KEY, version integer NOT NULL)`);
  await admin.query(`INSERT INTO ${name} SELECT g, 1 FROM generate_series(1, 10) g`);
  const source = (waitMs: number, mode: 'drop' | 'stale' = 'drop') => ({
    ttlMs: 600_000,
    staleMs: 600_000,
    source: {
      kind: 'postgres',
      url: db.url,
      query: `SELECT id, version FROM ${name} WHERE id = ANY($1)`,
      follow: {
        mode,
        slot: `${name}_${waitMs}_${mode}`,
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
      [stale]: source(1_000, 'stale'),
      [plain]: {
        source: {
          kind: 'postgres',
          url: db.url,
          query: `SELECT id, version FROM ${name} WHERE id = ANY($1)`,
        },
      },
    },
  });
}, 60_000);

afterAll(async () => {
  await service?.stop();
  await admin?.end();
  await db?.stop();
});

/** Commits `sql` and returns the position a client would pass: `pg_current_wal_lsn()` after it. */
async function commit(sql: string, values: unknown[] = []): Promise<string> {
  await admin.query(sql, values);
  const { rows } = await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
  return rows[0]?.lsn as string;
}

const get = (table: string, id: number, lsn?: string) =>
  readItem(service.url, table, id, lsn === undefined ? {} : { 'echostore-min-lsn': lsn });

describe('read-your-writes', () => {
  it('every read after a commit, given its position, returns the written version or newer', async () => {
    const written: number[] = [];
    const read: number[] = [];
    for (let n = 2; n <= 41; n++) {
      const id = 1 + (n % 3);
      // Cached first, so a plain read would be an L1 hit of the old version.
      await get(items, id);
      const lsn = await commit(`UPDATE ${name} SET version = $1 WHERE id = $2`, [n, id]);
      const answer = await get(items, id, lsn);
      expect(answer.status).toBe(200);
      written.push(n);
      read.push(answer.body.version as number);
      expect(answer.cacheStatus).toMatch(/; ryw=(stream|source)$/);
    }
    expect(read.every((v, i) => v >= (written[i] as number))).toBe(true);
  });

  it('in stale mode too, a read given its position is never answered with the row it replaced', async () => {
    for (let n = 2; n <= 21; n++) {
      const id = 9 + (n % 2);
      await get(stale, id);
      const lsn = await commit(`UPDATE ${name} SET version = $1 WHERE id = $2`, [n, id]);
      const answer = await get(stale, id, lsn);
      expect({ version: answer.body.version, via: answer.cacheStatus }).toEqual({
        version: n,
        via: expect.stringMatching(/; ryw=stream$/),
      });
    }
  });

  it('says ryw=stream when the stream passed the position within the wait', async () => {
    await get(items, 5);
    const lsn = await commit(`UPDATE ${name} SET version = version + 1 WHERE id = 5`);
    const { rows } = await admin.query<{ version: number }>(
      `SELECT version FROM ${name} WHERE id = 5`,
    );
    const answer = await get(items, 5, lsn);
    expect(answer.body.version).toBe(rows[0]?.version);
    expect(answer.cacheStatus).toMatch(/; ryw=stream$/);
  });

  it('says ryw=source when the stream has not reached the position in time, and reads the source', async () => {
    await get(impatient, 6);
    await commit(`UPDATE ${name} SET version = 99 WHERE id = 6`);
    // A position far ahead of the database's: no stream reaches it.
    const answer = await get(impatient, 6, 'FFFF/0');
    expect(answer.body.version).toBe(99);
    expect(answer.cacheStatus).toMatch(/^echostore; fwd=miss; fwd-status=200; ttl=0; ryw=source$/);
  });

  it('keeps a read-your-writes answer out of shared caches, and keys plain reads on the header', async () => {
    const plainRead = await get(items, 7);
    expect(plainRead.cacheControl).toMatch(/^max-age=\d+/);
    expect(plainRead.vary).toBe('echostore-min-lsn');
    const lsn = await commit(`UPDATE ${name} SET version = version + 1 WHERE id = 7`);
    const own = await get(items, 7, lsn);
    expect(own.cacheControl).toBe('no-store');
    expect(own.vary).toBe('echostore-min-lsn');
    // A table that follows no stream has no such header to vary on.
    expect((await get(plain, 7)).vary).toBeNull();
  });

  it('refuses a malformed position, or one on a table that follows no stream, with ECC_BAD_REQUEST', async () => {
    const malformed = await get(items, 1, 'not-an-lsn');
    expect(malformed.status).toBe(400);
    expect(malformed.body.error?.code).toBe('ECC_BAD_REQUEST');
    const unfollowed = await get(plain, 1, '0/0');
    expect(unfollowed.status).toBe(400);
    expect(unfollowed.body.error?.code).toBe('ECC_BAD_REQUEST');
  });

  it('refuses a position on a batch read with ECC_BAD_REQUEST rather than answer it without waiting', async () => {
    const lsn = await commit(`UPDATE ${name} SET version = version + 1 WHERE id = 4`);
    const headers = { 'echostore-min-lsn': lsn, 'content-type': 'application/json' };
    const answers = [
      await fetch(`${service.url}/v1/tables/${items}/items?ids=4,5`, { headers }),
      await fetch(`${service.url}/v1/tables/${items}/items:batchGet`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ ids: ['4', '5'] }),
      }),
    ];
    for (const r of answers) {
      expect(r.status).toBe(400);
      const body = (await r.json()) as { error?: { code?: string; message?: string } };
      expect(body.error?.code).toBe('ECC_BAD_REQUEST');
      expect(body.error?.message).toMatch(/single-item route/);
    }
  });
});

describe('read-your-writes wait', () => {
  it('is bounded by readYourWritesWaitMs when Valkey does not answer where the stream is: the source answers', async () => {
    const server = await spawnValkey();
    onTestFinished(() => server.stop());
    // A command timeout far past the wait: only the wait's own bound ends it.
    const raw = new Redis(server.url, {
      commandTimeout: 4_000,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    onTestFinished(() => raw.disconnect());
    await new Promise((resolve) => raw.once('ready', resolve));
    const after = new ReadAfter(new StreamPosition(raw, 'ecc:changes:{ryw-wait}:position'), 100, {
      header: 'echostore-min-lsn',
      parse: parseLsn,
    });
    const table = uniqueTable('ryw-wait');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: (id: string) => {
          loads++;
          return { id, version: 7 };
        },
      },
    });
    // Paused (SIGSTOP); its stop at the end SIGKILLs it.
    server.pause();
    const started = performance.now();
    const { result, via } = await after.read(store.table(table), '1', 5n);
    const tookMs = performance.now() - started;
    expect(via).toBe('source');
    expect(result.found && result.value).toEqual({ id: '1', version: 7 });
    expect(loads).toBe(1);
    // Unbounded, it would take the 4 s command timeout.
    expect(tookMs).toBeLessThan(2_000);
  });
});
