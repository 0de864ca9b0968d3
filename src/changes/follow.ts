/** Builds the follower of a `postgres` table whose source has `follow` on. */
import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Table } from '../store/table.js';
import { ChangeFollower, type ChangeTarget } from './follower.js';
import { StreamLease } from './lease.js';
import type { ChangeMetrics } from './metrics.js';
import { mysqlStream, pinStart } from './mysql-stream.js';
import { StreamPosition, streamKeys } from './position.js';
import { postgresStream, type WatchedTable } from './postgres-stream.js';

/** Default lease of a change stream, ms: a dead holder's successor reads within about 1.5 × this. */
export const DEFAULT_FOLLOW_LEASE_MS = 1_500;
/** Default interval of the status messages (and keepalive requests) sent to Postgres, ms. */
export const DEFAULT_STATUS_INTERVAL_MS = 200;

/** Default longest wait of a read-your-writes read for the stream to reach its position, ms. */
export const DEFAULT_READ_YOUR_WRITES_WAIT_MS = 200;

/**
 * What a change does to a cached row, the table's choice: `drop` it (a
 * DELETE: the next read loads) or mark it `stale` (a soft DELETE: the next
 * read answers the old value stale while one refresh runs).
 */
export type ChangeMode = 'drop' | 'stale';

/** The default {@link ChangeMode}. */
export const DEFAULT_CHANGE_MODE: ChangeMode = 'drop';

/**
 * A cache table as a stream's target: a changed row through `Table.invalidate`
 * (soft in `stale` mode), a TRUNCATE through `Table.purge` of the whole table
 * (soft in `stale` mode).
 */
export function tableTarget(table: Table, mode: ChangeMode = DEFAULT_CHANGE_MODE): ChangeTarget {
  const soft = mode === 'stale';
  return {
    invalidate: (id) => table.invalidate(id, soft ? { soft } : undefined),
    truncate: async () => {
      await table.purge({ all: true, soft });
    },
  };
}

/** A postgres source's `follow` (see the config schema for each field's meaning). */
export interface PostgresFollowConfig {
  mode?: ChangeMode;
  slot?: string;
  publication?: string;
  create?: boolean;
  tables?: WatchedTable[];
  url?: string;
  leaseMs?: number;
  statusIntervalMs?: number;
  readYourWritesWaitMs?: number;
}

/** What {@link followPostgres} needs of the running service. */
export interface FollowDeps {
  valkey: Redis | Cluster;
  metrics: ChangeMetrics;
  log: Logger;
  /** The store's namespace (`''`: the unnamed one): the stream's keys live in it. */
  namespace: string;
}

/** Postgres's longest slot name, bytes (NAMEDATALEN − 1). */
const MAX_SLOT_NAME = 63;

/**
 * A table's default stream name (the replication slot and publication, or the binlog
 * stream): `echostore_<table>`, in a namespace `echostore_<namespace>_<table>`, `-` as `_`
 * (slot names are `[a-z0-9_]`), so two deployments on one database or one Valkey never share
 * a slot, a lease or a position. One longer than a slot name may be is
 * `echostore_<16 hex digits of SHA-256 of namespace/table>`.
 */
export const defaultSlot = (table: string, namespace = '') => {
  const name = `echostore_${namespace === '' ? '' : `${namespace}_`}${table}`.replaceAll('-', '_');
  if (name.length <= MAX_SLOT_NAME) return name;
  return `echostore_${createHash('sha256').update(`${namespace}/${table}`).digest('hex').slice(0, 16)}`;
};

/**
 * Checks the database, then starts following: every instance competes for the
 * stream's lease, the holder reads the slot and applies its changes to `target`.
 *
 * @param table the cache table's name. @param sourceUrl, idColumn the source's.
 * @throws {ConfigError} (rejects) `ECC_BAD_CONFIG` naming `field` (see {@link postgresStream}).
 */
export async function followPostgres(
  table: string,
  source: { url: string; idColumn: string },
  follow: PostgresFollowConfig,
  target: ChangeTarget,
  deps: FollowDeps,
  field: string,
): Promise<ChangeFollower> {
  const slot = follow.slot ?? defaultSlot(table, deps.namespace);
  const stream = await postgresStream({
    url: follow.url ?? source.url,
    slot,
    publication: follow.publication ?? slot,
    tables: follow.tables ?? [{ table, idColumn: source.idColumn }],
    create: follow.create ?? true,
    statusIntervalMs: follow.statusIntervalMs ?? DEFAULT_STATUS_INTERVAL_MS,
    field,
    onInvisible: (xids) =>
      deps.log.warn(
        { stream: slot, xids },
        'a commit stayed invisible to new snapshots for 5 s: invalidating anyway',
      ),
    onCreateDeferred: (err) =>
      deps.log.warn(
        { err, stream: slot },
        'could not create the publication or the slot at start-up: the first run tries again (commits made until then are not streamed)',
      ),
  });
  deps.metrics.lagReaders.set(slot, () => stream.lagBytes());
  return followerOf(slot, stream, follow.leaseMs, target, deps);
}

/** A mysql source's `follow` (see the config schema for each field's meaning). */
export interface MysqlFollowConfig {
  mode?: ChangeMode;
  stream?: string;
  tables?: WatchedTable[];
  url?: string;
  serverId?: number;
  leaseMs?: number;
  readYourWritesWaitMs?: number;
}

/** A stream's default replica server id: 4,200 plus a hash of its name below 100,000. */
export const defaultServerId = (name: string) =>
  4_200 + ([...name].reduce((h, c) => (h * 31 + (c.codePointAt(0) ?? 0)) >>> 0, 7) % 100_000);

/**
 * Starts following a `mysql` table's binlog: every instance competes for the
 * stream's lease, the holder reads the binlog from the position saved in
 * Valkey and applies its changes to `target`. On a stream's first start the
 * binlog's current end is saved first ({@link pinStart}); when that fails
 * (the database or Valkey does not answer) it is logged, and the first run
 * starts from the binlog's end as it is then. Never rejects.
 */
export async function followMysql(
  table: string,
  source: { url: string; idColumn: string },
  follow: MysqlFollowConfig,
  target: ChangeTarget,
  deps: FollowDeps,
): Promise<ChangeFollower> {
  const name = follow.stream ?? defaultSlot(table, deps.namespace);
  const options = {
    url: follow.url ?? source.url,
    name,
    tables: follow.tables ?? [{ table, idColumn: source.idColumn }],
    serverId: follow.serverId ?? defaultServerId(name),
    valkey: deps.valkey,
    resumeKey: streamKeys(name, deps.namespace).binlog,
  };
  await pinStart(options).catch((err: unknown) =>
    deps.log.warn(
      { err, stream: name },
      "could not save the binlog's start position: the first run starts from the binlog's end then",
    ),
  );
  return followerOf(name, mysqlStream(options), follow.leaseMs, target, deps);
}

/** The follower of stream `name`: its lease and saved position in Valkey, under the fleet lease. */
function followerOf(
  name: string,
  stream: ConstructorParameters<typeof ChangeFollower>[0]['stream'],
  leaseMsOption: number | undefined,
  target: ChangeTarget,
  deps: FollowDeps,
): ChangeFollower {
  const keys = streamKeys(name, deps.namespace);
  const leaseMs = leaseMsOption ?? DEFAULT_FOLLOW_LEASE_MS;
  return new ChangeFollower({
    stream,
    lease: new StreamLease(deps.valkey, keys.lease, leaseMs),
    position: new StreamPosition(deps.valkey, keys.position),
    target,
    leaseMs,
    metrics: deps.metrics,
    log: deps.log.child({ stream: name }),
  });
}
