/** Starts a follower for every table of the service whose source has `follow` (Postgres's change stream, MySQL's binlog). */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ServiceConfig } from '../config/schema.js';
import { DEFAULT_ID_COLUMN } from '../sources/sql.js';
import type { Store } from '../store/store.js';
import {
  DEFAULT_READ_YOUR_WRITES_WAIT_MS,
  followMysql,
  followPostgres,
  tableTarget,
} from './follow.js';
import type { ChangeFollower } from './follower.js';
import { parseLsn } from './lsn.js';
import { changeMetrics } from './metrics.js';
import { parseBinlogPosition } from './mysql-stream.js';
import { StreamPosition, streamKeys } from './position.js';
import { MIN_BINLOG_HEADER, MIN_LSN_HEADER, ReadAfter } from './read-your-writes.js';

/** The service's followers, and the read-your-writes of each table that follows. */
export interface Followers {
  followers: ChangeFollower[];
  readAfter: Map<string, ReadAfter>;
}

/**
 * Checks each followed database and starts its follower, invalidating
 * through the table's own DELETE path (soft in `stale` mode) and purging
 * the table on a TRUNCATE.
 *
 * @throws {ConfigError} (rejects) `ECC_BAD_CONFIG` naming `tables.<name>.source.follow…`; the followers already started are closed first.
 */
export async function startFollowers(
  config: Pick<ServiceConfig, 'tables'>,
  store: Store,
  registry: Registry,
  log: Logger,
): Promise<Followers> {
  const followed = Object.entries(config.tables).flatMap(([name, t]) =>
    t.source.kind === 'postgres' && t.source.follow !== undefined
      ? [{ name, source: t.source, follow: t.source.follow }]
      : [],
  );
  const binlogs = Object.entries(config.tables).flatMap(([name, t]) =>
    t.source.kind === 'mysql' && t.source.follow !== undefined
      ? [{ name, source: t.source, follow: t.source.follow }]
      : [],
  );
  const readAfter = new Map<string, ReadAfter>();
  // Registered even when no table follows, so dashboards and alert rules always find the families.
  const metrics = changeMetrics(registry);
  if (followed.length + binlogs.length === 0) return { followers: [], readAfter };
  const { namespace } = store;
  const deps = { valkey: store.valkey, metrics, log, namespace };
  const followers: ChangeFollower[] = [];
  // Per cache table: its stream's applied position, and how its clients name a position.
  const readAfterOf = (
    table: string,
    stream: string,
    waitMs: number | undefined,
    format: ReadAfter['format'],
  ) =>
    readAfter.set(
      table,
      new ReadAfter(
        new StreamPosition(store.valkey, streamKeys(stream, namespace).position),
        waitMs ?? DEFAULT_READ_YOUR_WRITES_WAIT_MS,
        format,
      ),
    );
  try {
    // Each table's read-your-writes reads the position its follower's stream keeps.
    for (const { name, source, follow } of followed) {
      const follower = await followPostgres(
        name,
        { url: source.url, idColumn: source.idColumn ?? DEFAULT_ID_COLUMN },
        follow,
        tableTarget(store.table(name), follow.mode),
        deps,
        `tables.${name}.source.follow`,
      );
      followers.push(follower);
      readAfterOf(name, follower.streamName, follow.readYourWritesWaitMs, {
        header: MIN_LSN_HEADER,
        parse: parseLsn,
      });
    }
    // MySQL/MariaDB: no start-up check (a run reports a bad URL or a binlog that is off); the
    // first start saves the binlog's end as the stream's position.
    for (const { name, source, follow } of binlogs) {
      const follower = await followMysql(
        name,
        { url: source.url, idColumn: source.idColumn ?? DEFAULT_ID_COLUMN },
        follow,
        tableTarget(store.table(name), follow.mode),
        deps,
      );
      followers.push(follower);
      readAfterOf(name, follower.streamName, follow.readYourWritesWaitMs, {
        header: MIN_BINLOG_HEADER,
        parse: parseBinlogPosition,
      });
    }
  } catch (err) {
    await Promise.all(followers.map((f) => f.close()));
    throw err;
  }
  return { followers, readAfter };
}
