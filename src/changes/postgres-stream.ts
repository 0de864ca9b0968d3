/**
 * Postgres's change stream: logical replication with the built-in `pgoutput`
 * plugin (through pg-logical-replication), from a publication of the watched
 * tables and a replication slot, each created here when missing or named by
 * the operator. A run starts at the slot's acknowledged position; each
 * commit's ids go to the sink, and the commit is acknowledged to Postgres
 * (the slot's `confirmed_flush_lsn`) only once the sink has applied it.
 */

import pg from 'pg';
import type { Pgoutput } from 'pg-logical-replication';
import { LogicalReplicationService, PgoutputPlugin } from 'pg-logical-replication';
import { ConfigError } from '../errors.js';
import { formatLsn, parseLsn } from './lsn.js';
import type { ChangeBatch, ChangeStream, StreamSink } from './stream.js';

/** A watched table and the column of its changes that names the cache id. */
export interface WatchedTable {
  /** `name` or `schema.name` (schema `public` by default). */
  table: string;
  /** The column whose value, as text, is the cache id. */
  idColumn: string;
}

/** Options of {@link postgresStream}. */
export interface PostgresStreamOptions {
  /** A user with the REPLICATION attribute (and, to create them, rights to create publications). */
  url: string;
  /** The replication slot's name (`[a-z0-9_]{1,63}`); it names the stream. */
  slot: string;
  /** The publication's name. */
  publication: string;
  tables: readonly WatchedTable[];
  /** Create the publication and the slot when missing. */
  create: boolean;
  /** How often the stream asks Postgres for a keepalive (and so a status update and its position), ms. */
  statusIntervalMs: number;
  /** The config field, for errors. */
  field: string;
  /** Commits stayed invisible to new snapshots for 5 s and were applied anyway (logged by the caller). */
  onInvisible?: (xids: number[]) => void;
  /** Creating the publication or the slot at start-up failed for a reason that may pass (logged by the caller); the first run tries again. */
  onCreateDeferred?: (err: unknown) => void;
}

/**
 * Whether Postgres refused to create the publication or the slot for a reason a retry does not
 * change: SQLSTATE class 42 (no privilege, an unknown table), 55000 (a prerequisite, such as
 * `wal_level`), 53400 (`max_replication_slots` reached).
 */
function refusedForGood(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return (
    typeof code === 'string' && (code.startsWith('42') || code === '55000' || code === '53400')
  );
}

const qualified = (t: string) => (t.includes('.') ? t : `public.${t}`);

/**
 * Builds the stream and checks the database once: `wal_level` must be
 * `logical`, and without `create` the publication and the slot must exist.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.url` when Postgres
 *   cannot be reached, `<field>` when wal_level is not logical or a named
 *   publication or slot is missing.
 */
export async function postgresStream(
  options: PostgresStreamOptions,
): Promise<ChangeStream & { lagBytes(): Promise<number | undefined> }> {
  const pool = new pg.Pool({
    connectionString: options.url,
    max: 1,
    connectionTimeoutMillis: 2_000,
    idleTimeoutMillis: 10_000,
    application_name: 'echostore-changes',
    options: '-c statement_timeout=2000',
  });
  pool.on('error', () => {});
  try {
    await check(pool, options);
    if (options.create) {
      await createMissing(pool, options).catch((err: unknown) => {
        if (!refusedForGood(err)) {
          // A timeout (the slot waits for running transactions), a lost connection: the run tries again.
          options.onCreateDeferred?.(err);
          return;
        }
        const why = err instanceof Error ? err.message : String(err);
        throw new ConfigError(
          `${options.field}: cannot create the publication or the replication slot: ${why}`,
          { field: options.field, cause: err },
        );
      });
    }
  } catch (err) {
    await pool.end().catch(() => {});
    throw err;
  }
  const watched = new Map(options.tables.map((t) => [qualified(t.table), t.idColumn]));
  let closed = false;
  return {
    name: options.slot,
    run: (sink, signal) =>
      run(pool, options, watched, sink, signal, options.onInvisible ?? (() => {})),
    async lagBytes() {
      const { rows } = await pool.query<{ bytes: string | null }>(
        'SELECT GREATEST(0, pg_current_wal_lsn() - confirmed_flush_lsn)::text AS bytes FROM pg_replication_slots WHERE slot_name = $1',
        [options.slot],
      );
      const bytes = rows[0]?.bytes;
      return bytes === undefined || bytes === null ? undefined : Number(bytes);
    },
    async close() {
      if (closed) return;
      closed = true;
      await pool.end().catch(() => {});
    },
  };
}

async function check(pool: pg.Pool, o: PostgresStreamOptions): Promise<void> {
  let level: string;
  try {
    level = (await pool.query<{ wal_level: string }>('SHOW wal_level')).rows[0]?.wal_level ?? '';
  } catch (err) {
    throw new ConfigError(`${o.field}.url: cannot reach Postgres for the change stream`, {
      field: `${o.field}.url`,
      cause: err,
    });
  }
  if (level !== 'logical') {
    throw new ConfigError(
      `${o.field}: Postgres runs with wal_level=${level}; following changes needs wal_level=logical`,
      { field: o.field },
    );
  }
  if (o.create) return;
  const { rows } = await pool.query<{ publication: boolean; slot: boolean }>(
    'SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1) AS publication, EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $2) AS slot',
    [o.publication, o.slot],
  );
  if (rows[0]?.publication !== true)
    throw new ConfigError(`${o.field}.publication: no publication named ${o.publication}`, {
      field: `${o.field}.publication`,
    });
  if (rows[0]?.slot !== true)
    throw new ConfigError(`${o.field}.slot: no replication slot named ${o.slot}`, {
      field: `${o.field}.slot`,
    });
}

/**
 * Creates the publication and the slot when missing (another instance may race: a duplicate is
 * fine). Called at start-up, before the service is ready, so that every commit made once it
 * answers is in the slot (a slot created later would start past them, and read-your-writes would
 * wait on a position that already counts them); and again before each run, for a slot dropped since.
 */
async function createMissing(pool: pg.Pool, o: PostgresStreamOptions): Promise<void> {
  const pub = await pool.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [o.publication]);
  if (pub.rowCount === 0) {
    const tables = o.tables
      .map((t) =>
        qualified(t.table)
          .split('.')
          .map((part) => pg.escapeIdentifier(part))
          .join('.'),
      )
      .join(', ');
    await ignoreDuplicate(
      pool.query(`CREATE PUBLICATION ${pg.escapeIdentifier(o.publication)} FOR TABLE ${tables}`),
    );
  }
  const slot = await pool.query('SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [
    o.slot,
  ]);
  if (slot.rowCount === 0) {
    await ignoreDuplicate(
      pool.query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", [o.slot]),
    );
  }
}

/** Creates what is missing (with `create`) and returns the slot's acknowledged position. */
async function prepare(pool: pg.Pool, o: PostgresStreamOptions): Promise<bigint> {
  if (o.create) await createMissing(pool, o);
  const { rows } = await pool.query<{ lsn: string | null }>(
    'SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1',
    [o.slot],
  );
  const lsn = rows[0]?.lsn;
  if (lsn === undefined || lsn === null)
    throw new Error(`replication slot ${o.slot} is missing or not logical`);
  return parseLsn(lsn);
}

/** SQLSTATE 42710 duplicate_object: another instance created it first. */
async function ignoreDuplicate(q: Promise<unknown>): Promise<void> {
  try {
    await q;
  } catch (err) {
    if ((err as { code?: string }).code !== '42710') throw err;
  }
}

/**
 * Tells Postgres the stream is applied up to `position` exactly. The library
 * reports the LSN it is given plus one; a transaction whose commit record
 * starts at the reported position would then be skipped after a restart
 * (Postgres skips commits before `confirmed_flush_lsn`), so it is given one less.
 */
function acknowledge(
  service: LogicalReplicationService,
  position: bigint,
  ping = false,
): Promise<boolean> {
  return service.acknowledge(formatLsn(position - 1n), ping);
}

type Item =
  | { kind: 'batch'; batch: ChangeBatch; xid: number }
  | { kind: 'passed'; position: bigint };

/** How long a received commit may stay invisible to new snapshots before it is applied anyway, ms. */
const VISIBLE_WITHIN_MS = 5_000;

/**
 * Waits until transactions `xids` are visible to a new snapshot. Postgres
 * writes (and so streams) a commit record before it takes the transaction
 * out of the running set: for a moment a load can still read the old row
 * after the stream delivered the change. Invalidating only once the commit
 * is visible means a load that starts after the invalidation reads the new row.
 *
 * @param xids 32-bit transaction ids of pgoutput's BEGIN messages.
 * @returns false when one was still invisible after `withinMs` (default {@link VISIBLE_WITHIN_MS}).
 */
export async function waitVisible(
  pool: Pick<pg.Pool, 'query'>,
  xids: readonly number[],
  signal: AbortSignal,
  withinMs = VISIBLE_WITHIN_MS,
): Promise<boolean> {
  const deadline = performance.now() + withinMs;
  while (!signal.aborted && performance.now() < deadline) {
    const { rows } = await pool.query<{ xmax: string; xip: string[] }>(
      'SELECT pg_snapshot_xmax(s)::text AS xmax, ARRAY(SELECT x::text FROM pg_snapshot_xip(s) x) AS xip FROM pg_current_snapshot() s',
    );
    const row = rows[0];
    if (row === undefined) return false;
    const xmax = BigInt(row.xmax);
    const running = new Set(row.xip);
    // A transaction's 64-bit id: its 32-bit one is at most 2^31 behind xmax (else it is at or past xmax: running).
    const visible = (xid: number) => {
      const behind = (xmax - BigInt(xid)) & 0xffffffffn;
      return behind > 0n && behind < 0x80000000n && !running.has(String(xmax - behind));
    };
    if (xids.every(visible)) return true;
    await new Promise((r) => setTimeout(r, 1));
  }
  return false;
}

/**
 * The transactions and keepalives waiting in the queue, taken as one step:
 * their ids together, the last position, the earliest commit time. Applying
 * them at once costs one visibility check, one round of invalidations and
 * one acknowledgement however many commits arrived meanwhile.
 */
function takeAll(queue: Item[]): {
  batch: ChangeBatch | undefined;
  xids: number[];
  position: bigint;
} {
  const ids = new Set<string>();
  const xids: number[] = [];
  let truncated = false;
  let commits = 0;
  let commitTimeMs = Number.POSITIVE_INFINITY;
  let position = 0n;
  for (const item of queue.splice(0)) {
    if (item.kind === 'passed') {
      if (item.position > position) position = item.position;
      continue;
    }
    commits++;
    for (const id of item.batch.ids) ids.add(id);
    if (item.batch.ids.size > 0 || item.batch.truncated) xids.push(item.xid);
    truncated ||= item.batch.truncated;
    commitTimeMs = Math.min(commitTimeMs, item.batch.commitTimeMs);
    if (item.batch.position > position) position = item.batch.position;
  }
  const batch = commits === 0 ? undefined : { ids, truncated, position, commitTimeMs };
  return { batch, xids, position };
}

/** One run: subscribe, apply in order, acknowledge what was applied; ends on abort or on the first failure. */
async function run(
  pool: pg.Pool,
  o: PostgresStreamOptions,
  watched: Map<string, string>,
  sink: StreamSink,
  signal: AbortSignal,
  onInvisible: (xids: number[]) => void,
): Promise<void> {
  let acknowledged = await prepare(pool, o);
  const service = new LogicalReplicationService(
    {
      connectionString: o.url,
      application_name: 'echostore-changes',
      connectionTimeoutMillis: 5_000,
    },
    { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: false } },
  );
  const queue: Item[] = [];
  let open: { ids: Set<string>; truncated: boolean; xid: number } | undefined;
  let draining = false;
  let broken = false;
  let reject: (err: unknown) => void = () => {};
  const failed = new Promise<never>((_, r) => {
    reject = r;
  });
  // After a failure nothing more is applied or acknowledged: the next run reads it again.
  const fail = (err: unknown) => {
    broken = true;
    reject(err);
  };
  failed.catch(() => {});

  const drain = async () => {
    if (draining || broken) return;
    draining = true;
    try {
      while (queue.length > 0) {
        if (signal.aborted || broken) return;
        const { batch, xids, position } = takeAll(queue);
        if (batch !== undefined) {
          if (xids.length > 0 && !(await waitVisible(pool, xids, signal))) onInvisible(xids);
          await sink.apply(batch);
        } else if (position > acknowledged) await sink.passed(position);
        else continue;
        if (position > acknowledged) {
          acknowledged = position;
          await acknowledge(service, position);
        }
      }
    } catch (err) {
      fail(err);
    } finally {
      draining = false;
    }
  };

  service.on('data', (_lsn: string, m: Pgoutput.Message) => {
    switch (m.tag) {
      case 'begin':
        open = { ids: new Set(), truncated: false, xid: m.xid };
        break;
      case 'insert':
      case 'update':
      case 'delete': {
        const column = watched.get(`${m.relation.schema}.${m.relation.name}`);
        if (column === undefined || open === undefined) break;
        for (const row of [
          m.tag === 'delete' ? undefined : m.new,
          m.tag === 'insert' ? undefined : (m.old ?? m.key),
        ]) {
          const id = row?.[column];
          if (id !== undefined && id !== null) open.ids.add(String(id));
        }
        break;
      }
      case 'truncate':
        if (open !== undefined && m.relations.some((r) => watched.has(`${r.schema}.${r.name}`)))
          open.truncated = true;
        break;
      case 'commit': {
        const txn = open;
        open = undefined;
        if (txn === undefined || m.commitEndLsn === null) break;
        queue.push({
          kind: 'batch',
          xid: txn.xid,
          batch: {
            ids: txn.ids,
            truncated: txn.truncated,
            position: parseLsn(m.commitEndLsn),
            commitTimeMs: Number(m.commitTime) / 1000,
          },
        });
        void drain();
        break;
      }
    }
  });
  // A keepalive between transactions: everything before its position has been sent (and is queued).
  service.on('heartbeat', (lsn: string) => {
    if (open !== undefined) return;
    queue.push({ kind: 'passed', position: parseLsn(lsn) });
    void drain();
  });
  service.on('error', (err: Error) => fail(err));
  service.on('start', () => sink.started());
  const ping = setInterval(() => {
    void acknowledge(service, acknowledged, true).catch(() => {});
  }, o.statusIntervalMs);
  const aborted = new Promise<void>((resolve) => {
    if (signal.aborted) resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
  });
  try {
    const subscribed = service.subscribe(
      new PgoutputPlugin({ protoVersion: 1, publicationNames: [o.publication] }),
      o.slot,
      formatLsn(acknowledged),
    );
    await Promise.race([
      aborted,
      failed,
      subscribed.then(() => {
        if (!signal.aborted) throw new Error('the replication connection ended');
      }),
    ]);
  } finally {
    clearInterval(ping);
    await service.destroy().catch(() => {});
  }
}
