/**
 * Invalidation from Postgres's change stream, against a private Postgres
 * (wal_level=logical, harness/postgres-server.ts) and real redis-servers:
 * changes made directly in the database reach every instance, a load that
 * read the row before the commit never stores it after, one instance reads
 * the slot and another takes over when it dies, and a change is acknowledged
 * to Postgres only after Valkey applied it.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { type PrivatePostgres, startPostgres } from '../harness/postgres-server.js';
import { startService } from '../harness/service.js';
import { spawnValkey } from '../harness/valkey-server.js';
import { defaultSlot, followPostgres, tableTarget } from '../src/changes/follow.js';
import type { ChangeFollower, ChangeTarget } from '../src/changes/follower.js';
import { formatLsn, parseLsn } from '../src/changes/lsn.js';
import { changeMetrics } from '../src/changes/metrics.js';
import { StreamPosition, streamKeys } from '../src/changes/position.js';
import { waitVisible } from '../src/changes/postgres-stream.js';
import type { Store } from '../src/store/store.js';
import {
  errorOf,
  openStore,
  readEnvelope,
  scopedValkey,
  storedValue,
  valkeyNowMs,
} from './helpers/probe.js';
import { deferred, uniqueTable, valkeyUrl } from './helpers/store.js';

let db: PrivatePostgres;
let admin: pg.Pool;

beforeAll(async () => {
  // pg_stat_statements: the stale-mode tests count the loader's SELECTs at the database.
  db = await startPostgres({ settings: { shared_preload_libraries: 'pg_stat_statements' } });
  admin = new pg.Pool({ connectionString: db.url, max: 4 });
  await admin.query('CREATE EXTENSION pg_stat_statements');
}, 60_000);

afterAll(async () => {
  await admin?.end();
  await db?.stop();
});

/** A fresh watched table `items_<hex>` with rows 1..n at version 1, and a slot named after it. */
async function itemsTable(n = 5): Promise<string> {
  const name = `items_${randomBytes(4).toString('hex')}`;
  await admin.query(`CREATE TABLE ${name} (id integer PRIMARY KEY, version integer NOT NULL)`);
  await admin.query(`INSERT INTO ${name} SELECT g, 1 FROM generate_series(1, $1) g`, [n]);
  onTestFinished(async () => {
    await admin.query(
      'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active',
      [name],
    );
  });
  return name;
}

/** Reads one row from the database (the source of truth), optionally holding the answer until `hold` resolves. */
const loaderOf =
  (name: string, hold?: (id: string) => Promise<void>) =>
  async (id: string): Promise<unknown> => {
    const { rows } = await admin.query(`SELECT id, version FROM ${name} WHERE id = $1`, [
      Number(id),
    ]);
    await hold?.(id);
    return rows[0];
  };

/** Starts following `name` for `store`'s cache table `table`. */
async function follow(
  store: Store,
  table: string,
  name: string,
  target: ChangeTarget = tableTarget(store.table(table)),
  registry = new Registry(),
  /** The slot; null: the store's namespace's default. */
  slot: string | null = name,
): Promise<ChangeFollower> {
  const follower = await followPostgres(
    table,
    { url: db.url, idColumn: 'id' },
    {
      slot: slot ?? undefined,
      tables: [{ table: name, idColumn: 'id' }],
      leaseMs: 600,
      statusIntervalMs: 50,
    },
    target,
    {
      valkey: store.valkey,
      metrics: changeMetrics(registry),
      log: pino({ level: 'silent' }),
      namespace: store.namespace,
    },
    'source.follow',
  );
  onTestFinished(() => follower.close());
  return follower;
}

/** The commit position just after `sql` ran in its own transaction. */
async function commit(sql: string): Promise<bigint> {
  await admin.query(sql);
  const { rows } = await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
  return parseLsn(rows[0]?.lsn ?? '0/0');
}

const versionOf = async (store: Store, table: string, id: string) => {
  const r = await store.table(table).get(id);
  return r.found ? (r.value as { version: number }).version : undefined;
};

/** Row 1 reads version 1 on `a` and `b`; an UPDATE in Postgres makes both read version 2. */
async function updateReachesBoth(name: string, table: string, a: Store, b: Store) {
  expect(await versionOf(a, table, '1')).toBe(1);
  expect(await versionOf(b, table, '1')).toBe(1);
  await admin.query(`UPDATE ${name} SET version = 2 WHERE id = 1`);
  await vi.waitFor(
    async () => {
      expect(await versionOf(a, table, '1')).toBe(2);
      expect(await versionOf(b, table, '1')).toBe(2);
    },
    { timeout: 10_000, interval: 20 },
  );
}

describe("invalidation from Postgres's change stream", () => {
  it('an UPDATE made in Postgres reaches the L1 of every instance', async () => {
    const name = await itemsTable();
    const table = uniqueTable('pg-follow');
    const a = await openStore({ [table]: { load: loaderOf(name), ttlMs: 600_000 } });
    const b = await openStore({ [table]: { load: loaderOf(name), ttlMs: 600_000 } });
    const fa = await follow(a, table, name);
    const fb = await follow(b, table, name);
    await vi.waitFor(() => expect(fa.reading || fb.reading).toBe(true), { timeout: 10_000 });
    await updateReachesBoth(name, table, a, b);
    // One reader per slot: Postgres would refuse a second, and the lease never lets one try.
    expect(fa.reading && fb.reading).toBe(false);
  });

  it('deployments in two namespaces follow with slots, leases and positions of their own', async () => {
    const name = await itemsTable();
    const table = uniqueTable('pg-ns');
    const hex = randomBytes(3).toString('hex');
    const [nsA, nsB] = [`ns-a-${hex}`, `ns-b-${hex}`];
    const a = await openStore(
      { [table]: { load: loaderOf(name), ttlMs: 600_000 } },
      { namespace: nsA },
    );
    const b = await openStore(
      { [table]: { load: loaderOf(name), ttlMs: 600_000 } },
      { namespace: nsB },
    );
    // No slot named: each takes its namespace's default.
    const fa = await follow(a, table, name, undefined, undefined, null);
    const fb = await follow(b, table, name, undefined, undefined, null);
    onTestFinished(async () => {
      await Promise.all([fa.close(), fb.close()]);
      await admin.query(
        'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = ANY($1) AND NOT active',
        [[defaultSlot(table, nsA), defaultSlot(table, nsB)]],
      );
    });
    // Had they shared the lease (one key for both), only one would ever read.
    await vi.waitFor(() => expect(fa.reading && fb.reading).toBe(true), { timeout: 10_000 });
    const raw = scopedValkey();
    expect(await raw.exists(streamKeys(defaultSlot(table, nsA), nsA).lease)).toBe(1);
    expect(await raw.exists(streamKeys(defaultSlot(table, nsB), nsB).lease)).toBe(1);
    await updateReachesBoth(name, table, a, b);
  });

  it('a DELETE and an INSERT invalidate too, and an UPDATE of the id invalidates the old and the new id', async () => {
    const name = await itemsTable();
    const table = uniqueTable('pg-follow');
    const a = await openStore({
      [table]: { load: loaderOf(name), ttlMs: 600_000, negativeTtlMs: 600_000 },
    });
    const fa = await follow(a, table, name);
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    for (const id of ['2', '3', '9', '10']) await a.table(table).get(id);
    await admin.query(`DELETE FROM ${name} WHERE id = 2`);
    await admin.query(`INSERT INTO ${name} VALUES (9, 7)`);
    await admin.query(`UPDATE ${name} SET id = 10, version = 8 WHERE id = 3`);
    await vi.waitFor(
      async () => {
        expect(await versionOf(a, table, '2')).toBeUndefined();
        expect(await versionOf(a, table, '9')).toBe(7);
        expect(await versionOf(a, table, '3')).toBeUndefined();
        expect(await versionOf(a, table, '10')).toBe(8);
      },
      { timeout: 10_000, interval: 20 },
    );
  });
});

describe('the commit-vs-fill race', () => {
  /**
   * Instance A loads id 1 and holds the row it read (version 1); the row is
   * updated and committed; the follower (on instance B) applies the change;
   * then A's load finishes and tries to store version 1. Returns what Valkey
   * and a third instance hold afterwards.
   */
  async function race(targetOf: (b: Store, table: string) => ChangeTarget, cachedStale = false) {
    const name = await itemsTable();
    const table = uniqueTable('pg-race');
    const raw = scopedValkey();
    const read = deferred<void>();
    const gate = deferred<void>();
    if (cachedStale) {
      // Version 1 in Valkey, past its soft TTL: A's read below is a refresh that loads it again.
      const w = await openStore({ [table]: { load: loaderOf(name), ttlMs: 1, staleMs: 600_000 } });
      expect(await versionOf(w, table, '1')).toBe(1);
      await new Promise((r) => setTimeout(r, 5));
    }
    const a = await openStore({
      [table]: {
        ttlMs: 600_000,
        staleMs: 600_000,
        load: loaderOf(name, async () => {
          read.resolve();
          await gate.promise;
        }),
      },
    });
    const b = await openStore({ [table]: { load: loaderOf(name), ttlMs: 600_000 } });
    const fb = await follow(b, table, name, targetOf(b, table));
    await vi.waitFor(() => expect(fb.reading).toBe(true), { timeout: 10_000 });
    const loading = a.table(table).get('1');
    await read.promise;
    const committed = await commit(`UPDATE ${name} SET version = 2 WHERE id = 1`);
    const position = new StreamPosition(raw, streamKeys(name).position);
    await vi.waitFor(
      async () => expect((await position.read()) ?? 0n).toBeGreaterThanOrEqual(committed),
      {
        timeout: 10_000,
        interval: 10,
      },
    );
    gate.resolve();
    const first = await loading;
    // A's load has landed (with a stale row in hand its caller was answered before it).
    await vi.waitFor(() => expect(a.table(table).stats().flights).toBe(0));
    const storedEnvelope = await readEnvelope(raw, table, '1');
    const valkeyMs = await valkeyNowMs(raw);
    const stored = (await storedValue(raw, table, '1')) as { version: number } | undefined;
    const c = await openStore({ [table]: { load: loaderOf(name) } });
    const after = await c.table(table).get('1');
    return {
      first: first.found ? (first.value as { version: number }).version : undefined,
      stored,
      storedEnvelope: storedEnvelope as Exclude<typeof storedEnvelope, null | 'garbage'>,
      valkeyMs,
      next: after.found ? (after.value as { version: number }).version : undefined,
      nextStale: after.stale,
      /** The version c answers once a read finds no stale row. */
      eventually: () =>
        vi.waitFor(
          async () => {
            const r = await c.table(table).get('1');
            expect(r.stale).toBe(false);
            return r.found ? (r.value as { version: number }).version : undefined;
          },
          { timeout: 5_000, interval: 20 },
        ),
    };
  }

  it("a load that read the row before the commit never stores it after the stream's invalidation", async () => {
    const { first, stored, next } = await race((b, table) => tableTarget(b.table(table)));
    // The caller that asked before the commit may get what it read…
    expect(first).toBe(1);
    // …but the tombstone cancelled the load's lease: its fill was refused.
    expect(stored?.version).not.toBe(1);
    expect(next).toBe(2);
  });

  it("in stale mode, a load that read the row before the commit never stores it as fresh after the stream's change", async () => {
    const { first, stored, storedEnvelope, valkeyMs, next, nextStale, eventually } = await race(
      (b, table) => tableTarget(b.table(table), 'stale'),
      true,
    );
    expect(first).toBe(1);
    // The old row stays in Valkey, stale from the change (not the load's fresh fill)…
    expect(stored?.version).toBe(1);
    expect(storedEnvelope.softExpiresAt).toBeLessThanOrEqual(valkeyMs);
    // …so the next read anywhere answers it stale, and a refresh brings the committed row.
    expect({ next, nextStale }).toEqual({ next: 1, nextStale: true });
    expect(await eventually()).toBe(2);
  });

  it('with a plain DEL of the key instead, the same load stores the old row (why the stream uses the DELETE path)', async () => {
    const { stored, next } = await race((b, table) => ({
      ...tableTarget(b.table(table)),
      invalidate: async (id) => {
        await b.valkey.del(`ecc:${table}:{${id}}`);
      },
    }));
    expect(stored?.version).toBe(1);
    expect(next).toBe(1);
  });
});

describe('the acknowledged position', () => {
  it('is not acknowledged to Postgres while Valkey is down, and the change is applied once it is back, in the same run', async () => {
    const server = await spawnValkey();
    onTestFinished(() => server.stop());
    const name = await itemsTable();
    const table = uniqueTable('pg-ack');
    const a = await openStore(
      { [table]: { load: loaderOf(name), ttlMs: 600_000 } },
      { valkey: server.url, readyTimeoutMs: 2_000 },
    );
    const registry = new Registry();
    const fa = await follow(a, table, name, undefined, registry);
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    const confirmed = async () => {
      const { rows } = await admin.query<{ lsn: string }>(
        'SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1',
        [name],
      );
      return parseLsn(rows[0]?.lsn ?? '0/0');
    };
    await commit(`UPDATE ${name} SET version = 2 WHERE id = 4`);
    await vi.waitFor(async () => expect(await versionOf(a, table, '4')).toBe(2), {
      timeout: 10_000,
    });
    await server.kill();
    const before = await confirmed();
    const committed = await commit(`UPDATE ${name} SET version = 3 WHERE id = 5`);
    // A fixed wait, to show something does not happen: the slot is not acknowledged past the commit.
    await new Promise((r) => setTimeout(r, 1_000));
    expect(await confirmed()).toBeLessThan(committed);
    expect(await confirmed()).toBeGreaterThanOrEqual(before);
    await server.restart();
    await vi.waitFor(async () => expect(await confirmed()).toBeGreaterThanOrEqual(committed), {
      timeout: 10_000,
      interval: 50,
    });
    const raw = scopedValkey(server.url);
    // The position Valkey keeps is at least the acknowledged one: it is raised first.
    expect(
      (await new StreamPosition(raw, streamKeys(name).position).read()) ?? 0n,
    ).toBeGreaterThanOrEqual(committed);
    expect(formatLsn(committed)).toMatch(/^[0-9A-F]+\/[0-9A-F]+$/);
    // The refused change was applied again within the run: the stream never failed and restarted.
    expect(await registry.metrics()).not.toMatch(/echostore_changes_restarts_total\{[^}]*\} [1-9]/);
  }, 30_000);

  it('reports the slot lag in bytes', async () => {
    const name = await itemsTable();
    const table = uniqueTable('pg-lag');
    const registry = new Registry();
    const a = await openStore({ [table]: { load: loaderOf(name) } });
    const fa = await follow(a, table, name, undefined, registry);
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    await vi.waitFor(async () => {
      const text = await registry.metrics();
      expect(text).toMatch(new RegExp(`echostore_changes_lag_bytes\\{stream="${name}"\\} \\d+`));
      expect(text).toMatch(new RegExp(`echostore_changes_holder\\{stream="${name}"\\} 1`));
    });
  });
});

describe('one reader per slot per fleet', () => {
  it('when the reading instance is SIGKILLed another takes over, and no change made meanwhile is lost', async () => {
    const name = await itemsTable(20);
    const cache = uniqueTable('pg-kill');
    const config = {
      valkey: { url: valkeyUrl() },
      tables: {
        [cache]: {
          ttlMs: 600_000,
          source: {
            kind: 'postgres',
            url: db.url,
            query: `SELECT id, version FROM ${name} WHERE id = ANY($1)`,
            follow: { slot: name, tables: [{ table: name, idColumn: 'id' }], leaseMs: 1_000 },
          },
        },
      },
    };
    const services = [await startService(config), await startService(config)];
    onTestFinished(async () => {
      await Promise.all(services.map((s) => s.stop()));
    });
    const holder = async (s: (typeof services)[number]) =>
      /echostore_changes_holder\{stream="[a-z0-9_]+"\} 1/.test(
        await (await fetch(`${s.url}/metrics`)).text(),
      );
    let reading: (typeof services)[number] | undefined;
    await vi.waitFor(
      async () => {
        const held = await Promise.all(services.map(holder));
        expect(held.filter(Boolean)).toHaveLength(1);
        reading = services[held.indexOf(true)];
      },
      { timeout: 10_000, interval: 100 },
    );
    const other = services.find((s) => s !== reading) as (typeof services)[number];
    const get = async (id: number) =>
      (
        (await (await fetch(`${other.url}/v1/tables/${cache}/items/${id}`)).json()) as {
          version: number;
        }
      ).version;
    for (let id = 1; id <= 20; id++) expect(await get(id)).toBe(1);
    reading?.process.kill('SIGKILL');
    for (let id = 1; id <= 20; id++)
      await admin.query(`UPDATE ${name} SET version = 2 WHERE id = $1`, [id]);
    // How fast is the drill's to say (drill:consistency prints the takeover time); here: that it happens.
    await vi.waitFor(async () => expect(await holder(other)).toBe(true), {
      timeout: 15_000,
      interval: 50,
    });
    await vi.waitFor(
      async () => {
        for (let id = 1; id <= 20; id++) expect(await get(id)).toBe(2);
      },
      { timeout: 15_000, interval: 50 },
    );
  }, 60_000);
});

/** Starts following Postgres at `url` for `store`'s `table` with a target that does nothing: to see it refused. */
const startFollowing = (
  store: Store,
  url: string,
  table: string,
  follow: Parameters<typeof followPostgres>[2],
) =>
  followPostgres(
    table,
    { url, idColumn: 'id' },
    follow,
    { invalidate: async () => {}, truncate: async () => {} },
    {
      valkey: store.valkey,
      metrics: changeMetrics(new Registry()),
      log: pino({ level: 'silent' }),
      namespace: '',
    },
    'source.follow',
  );

describe('configuration', () => {
  it('refuses a database without wal_level=logical with ECC_BAD_CONFIG', async () => {
    const plain = await startPostgres({ settings: { wal_level: 'replica' } });
    onTestFinished(() => plain.stop());
    const a = await openStore({ [uniqueTable('pg-cfg')]: { load: () => undefined } });
    const err = await errorOf(startFollowing(a, plain.url, 't', {}));
    expect(err.code).toBe('ECC_BAD_CONFIG');
  }, 30_000);

  it('creates the slot before it is ready, so a commit made right after is streamed; a user who cannot is refused with ECC_BAD_CONFIG', async () => {
    const name = await itemsTable();
    const table = uniqueTable('pg-slot');
    const a = await openStore({ [table]: { load: loaderOf(name), ttlMs: 600_000 } });
    // No lease yet (an instance takes a free one at its second look): the slot exists all the same.
    const fa = await follow(a, table, name);
    const slots = await admin.query('SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [
      name,
    ]);
    expect(slots.rowCount).toBe(1);
    expect(await versionOf(a, table, '2')).toBe(1);
    await commit(`UPDATE ${name} SET version = 2 WHERE id = 2`);
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    await vi.waitFor(async () => expect(await versionOf(a, table, '2')).toBe(2), {
      timeout: 10_000,
    });

    const role = `norepl_${randomBytes(4).toString('hex')}`;
    await admin.query(`CREATE ROLE ${role} LOGIN NOREPLICATION`);
    onTestFinished(() => admin.query(`DROP ROLE ${role}`).then(() => {}));
    const url = new URL(db.url);
    url.username = role;
    const err = await errorOf(
      startFollowing(a, url.toString(), table, {
        slot: `${name}_norepl`,
        tables: [{ table: name, idColumn: 'id' }],
      }),
    );
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toMatch(/cannot create the publication or the replication slot/);
  }, 30_000);

  it("starts while a long transaction holds the slot's creation back, and creates it at the first run after", async () => {
    const name = await itemsTable();
    const table = uniqueTable('pg-slot-later');
    const a = await openStore({ [table]: { load: loaderOf(name), ttlMs: 600_000 } });
    // A slot is created only once every transaction running then has ended.
    const long = await admin.connect();
    await long.query('BEGIN');
    await long.query('SELECT pg_current_xact_id()');
    let released = false;
    onTestFinished(async () => {
      if (!released) await long.query('ROLLBACK');
      long.release();
    });
    const fa = await follow(a, table, name);
    const slots = () =>
      admin.query('SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [name]);
    expect((await slots()).rowCount).toBe(0);
    await long.query('ROLLBACK');
    released = true;
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 15_000 });
    expect((await slots()).rowCount).toBe(1);
  }, 30_000);
});

describe('a commit is applied once it is visible', () => {
  it('waits while the transaction still runs, and returns as soon as a new snapshot sees it', async () => {
    const client = await admin.connect();
    onTestFinished(() => client.release());
    await client.query('BEGIN');
    const { rows } = await client.query<{ xid: string }>(
      'SELECT (pg_current_xact_id()::text::bigint % 4294967296)::text AS xid',
    );
    const xid = Number(rows[0]?.xid);
    expect(await waitVisible(admin, [xid], new AbortController().signal, 200)).toBe(false);
    await client.query('COMMIT');
    expect(await waitVisible(admin, [xid], new AbortController().signal, 200)).toBe(true);
  });
});

/** Calls of the loader's SELECT on `name` the database ran (pg_stat_statements), by statement text. */
async function selectsOf(name: string): Promise<number> {
  const { rows } = await admin.query<{ calls: string | null }>(
    "SELECT sum(calls)::text AS calls FROM pg_stat_statements WHERE query LIKE 'SELECT id, version FROM ' || $1 || ' WHERE %'",
    [name],
  );
  return Number(rows[0]?.calls ?? 0);
}

/** Waits until the slot's applied position in Valkey has passed `committed`. */
async function applied(slot: string, committed: bigint): Promise<void> {
  const position = new StreamPosition(scopedValkey(), streamKeys(slot).position);
  await vi.waitFor(
    async () => expect((await position.read()) ?? 0n).toBeGreaterThanOrEqual(committed),
    { timeout: 10_000, interval: 10 },
  );
}

describe('stale mode (follow.mode: stale)', () => {
  it('an UPDATE made in Postgres is answered stale once, then the new row after one refresh, counted at the database', async () => {
    const name = await itemsTable();
    const cache = uniqueTable('pg-stale');
    const service = await startService({
      valkey: { url: valkeyUrl() },
      tables: {
        [cache]: {
          ttlMs: 600_000,
          staleMs: 600_000,
          source: {
            kind: 'postgres',
            url: db.url,
            query: `SELECT id, version FROM ${name} WHERE id = ANY($1)`,
            follow: { slot: name, mode: 'stale', tables: [{ table: name, idColumn: 'id' }] },
          },
        },
      },
    });
    onTestFinished(() => service.stop());
    const get = async () => {
      const r = await fetch(`${service.url}/v1/tables/${cache}/items/1`);
      const body = (await r.json()) as { version: number };
      return { version: body.version, cacheStatus: r.headers.get('cache-status') ?? '' };
    };
    await vi.waitFor(
      async () =>
        expect(await (await fetch(`${service.url}/metrics`)).text()).toMatch(
          new RegExp(`echostore_changes_holder\\{stream="${name}"\\} 1`),
        ),
      { timeout: 15_000, interval: 100 },
    );
    // From here on every SELECT of the table is the loader's (the source checked its query at start).
    const base = await selectsOf(name);
    expect(await get()).toMatchObject({ version: 1 });
    expect(await get()).toMatchObject({
      version: 1,
      cacheStatus: expect.stringMatching(/detail=l1$/),
    });
    expect(await selectsOf(name)).toBe(base + 1);
    await applied(name, await commit(`UPDATE ${name} SET version = 2 WHERE id = 1`));
    // The next read answers the old row, stale; one refresh reads the source.
    const stale = await get();
    expect(stale.version).toBe(1);
    expect(stale.cacheStatus).toMatch(/^echostore; hit; ttl=-?\d+; detail=l[12]-stale$/);
    await vi.waitFor(async () => expect(await selectsOf(name)).toBe(base + 2), {
      timeout: 5_000,
      interval: 20,
    });
    await vi.waitFor(async () => expect(await get()).toMatchObject({ version: 2 }), {
      timeout: 5_000,
      interval: 20,
    });
    const fresh = await get();
    expect(fresh).toMatchObject({ version: 2, cacheStatus: expect.stringMatching(/detail=l1$/) });
    // One refresh per change: the database saw exactly one more SELECT.
    expect(await selectsOf(name)).toBe(base + 2);
  }, 60_000);
});

describe('TRUNCATE of a watched table', () => {
  it('drop mode: purges every cached row of the table on every instance', async () => {
    const name = await itemsTable();
    const table = uniqueTable('pg-trunc');
    const opts = { load: loaderOf(name), ttlMs: 600_000, negativeTtlMs: 600_000 };
    const a = await openStore({ [table]: opts });
    const b = await openStore({ [table]: opts });
    const fa = await follow(a, table, name);
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    for (const id of ['1', '2', '3']) {
      expect(await versionOf(a, table, id)).toBe(1);
      expect(await versionOf(b, table, id)).toBe(1);
    }
    const before = await selectsOf(name);
    await applied(name, await commit(`TRUNCATE ${name}`));
    for (const id of ['1', '2', '3']) {
      expect(await versionOf(a, table, id)).toBeUndefined();
      await vi.waitFor(async () => expect(await versionOf(b, table, id)).toBeUndefined(), {
        timeout: 5_000,
        interval: 20,
      });
    }
    // Each row was read again from the (now empty) table: a hard purge, not a stale answer.
    expect(await selectsOf(name)).toBeGreaterThanOrEqual(before + 3);
  });

  it('stale mode: the next read answers each old row stale, then the truncated table (not found)', async () => {
    const name = await itemsTable();
    const table = uniqueTable('pg-trunc-stale');
    const a = await openStore({
      [table]: { load: loaderOf(name), ttlMs: 600_000, staleMs: 600_000, negativeTtlMs: 600_000 },
    });
    const fa = await follow(a, table, name, tableTarget(a.table(table), 'stale'));
    await vi.waitFor(() => expect(fa.reading).toBe(true), { timeout: 10_000 });
    expect(await versionOf(a, table, '1')).toBe(1);
    await applied(name, await commit(`TRUNCATE ${name}`));
    const stale = await a.table(table).get('1');
    expect({ found: stale.found, stale: stale.stale }).toEqual({ found: true, stale: true });
    await vi.waitFor(async () => expect(await versionOf(a, table, '1')).toBeUndefined(), {
      timeout: 5_000,
      interval: 20,
    });
  });
});
