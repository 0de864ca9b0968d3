/**
 * MySQL's and MariaDB's change stream: the row binlog (through
 * @vlasky/zongji), read from the position saved in Valkey after the last
 * applied transaction (on a stream's very first start, from the binlog's end
 * as it was when the service started: {@link pinStart}). Each
 * transaction's ids go to the sink at its commit (the `Xid` event), a
 * `TRUNCATE` of a watched table (a statement: the row binlog has no row
 * event for it) at its `Query` event, and the end position is saved only
 * once the sink has applied it.
 */
import ZongJi, { type AnyBinlogEvent } from '@vlasky/zongji';
import type { Cluster, Redis } from 'ioredis';
import mysql from 'mysql2/promise';
import { BadRequestError } from '../errors.js';
import type { WatchedTable } from './postgres-stream.js';
import type { ChangeBatch, ChangeStream, StreamSink } from './stream.js';

/** Options of {@link mysqlStream}. */
export interface MysqlStreamOptions {
  /** A user with REPLICATION SLAVE and REPLICATION CLIENT (`mysql://…/database`). */
  url: string;
  /** The stream's name: it names the lease and the saved position. */
  name: string;
  /** `name` or `database.name` (the URL's database by default). */
  tables: readonly WatchedTable[];
  /** The replica server id the stream connects as (unique among the server's replicas). */
  serverId: number;
  /** Where the resume position (`file:position`) is kept. */
  valkey: Redis | Cluster;
  /** The key it is kept under (`streamKeys(name, namespace).binlog`). */
  resumeKey: string;
}

const BINLOG_FILE = /^(.*)\.(\d+)$/;

/** A binlog position as one number that grows along the log: file sequence × 2^32 + offset. */
export function binlogPosition(file: string, offset: number): bigint {
  const seq = BINLOG_FILE.exec(file)?.[2];
  return (BigInt(seq ?? 0) << 32n) | BigInt(offset);
}

const FILE_POSITION = /^([A-Za-z0-9_.-]{1,200}\.\d{1,10}):(\d{1,20})$/;

/**
 * The position of `File:Position` text, as `SHOW MASTER STATUS` prints it
 * right after the client's commit (`binlog.000042:1234`).
 *
 * @throws {BadRequestError} `ECC_BAD_REQUEST` when `text` is not one.
 */
export function parseBinlogPosition(text: string): bigint {
  const m = FILE_POSITION.exec(text);
  const offset = m === null ? Number.NaN : Number(m[2]);
  if (m === null || !Number.isSafeInteger(offset) || offset >= 2 ** 32)
    throw new BadRequestError(
      `not a binlog position (file:position, as SHOW MASTER STATUS prints): ${text.slice(0, 40)}`,
    );
  return binlogPosition(m[1] as string, offset);
}

const NAME = '(`[^`]+`|[A-Za-z0-9_$]+)';
const TRUNCATE = new RegExp(
  `^\\s*TRUNCATE\\s+(?:TABLE\\s+)?(?:${NAME}\\.)?${NAME}\\s*;?\\s*$`,
  'i',
);

/**
 * The `database.table` a statement truncates (`TRUNCATE [TABLE] [db.]name`,
 * the statement's default database when unqualified), or undefined when it
 * is not a TRUNCATE.
 */
export function truncatedTable(event: { query: string; schema: string }): string | undefined {
  const m = TRUNCATE.exec(event.query);
  if (m === null) return undefined;
  const bare = (name: string) => name.replace(/^`|`$/g, '');
  return `${m[1] === undefined ? event.schema : bare(m[1])}.${bare(m[2] as string)}`;
}

/** Builds the stream (nothing connects until a run). */
export function mysqlStream(options: MysqlStreamOptions): ChangeStream {
  const database = new URL(options.url).pathname.slice(1);
  const watched = new Map(
    options.tables.map((t) => [
      t.table.includes('.') ? t.table : `${database}.${t.table}`,
      t.idColumn,
    ]),
  );
  const { resumeKey } = options;
  return {
    name: options.name,
    run: (sink, signal) => run(options, watched, resumeKey, sink, signal),
    async close() {},
  };
}

/**
 * Saves the binlog's current end as the stream's resume position, unless one is saved already
 * (`SET NX`). Called at start-up, before the service is ready: the first run reads from there,
 * so a commit made once the service answers is read whenever the first run starts (without it,
 * that run would start from the binlog's end as it is then, past such a commit).
 *
 * @throws (rejects) when the database or Valkey does not answer, or the binlog is off (the
 *   caller logs it; the first run then starts from the binlog's end, as before).
 */
export async function pinStart(
  o: Pick<MysqlStreamOptions, 'url' | 'valkey' | 'resumeKey'>,
): Promise<void> {
  if ((await o.valkey.exists(o.resumeKey)) === 1) return;
  const conn = await mysql.createConnection({ uri: o.url, connectTimeout: 2_000 });
  try {
    // MySQL 8.4 names it SHOW BINARY LOG STATUS; MariaDB and older MySQL, SHOW MASTER STATUS.
    // Each bounded (2 s): a database that accepts and never answers must not hold the start-up.
    const status = await conn
      .query({ sql: 'SHOW MASTER STATUS', timeout: 2_000 })
      .catch(() => conn.query({ sql: 'SHOW BINARY LOG STATUS', timeout: 2_000 }));
    const row = (status[0] as Array<{ File?: string; Position?: number | string }>)[0];
    if (row?.File === undefined || row.Position === undefined)
      throw new Error('the binary log is off (SHOW MASTER STATUS answered no row)');
    await o.valkey.set(o.resumeKey, `${row.File}:${row.Position}`, 'NX');
  } finally {
    conn.destroy();
  }
}

type Rows = { rows: Array<Record<string, unknown>> };

async function run(
  o: MysqlStreamOptions,
  watched: Map<string, string>,
  resumeKey: string,
  sink: StreamSink,
  signal: AbortSignal,
): Promise<void> {
  const resume = await o.valkey.get(resumeKey);
  const at = resume === null ? undefined : /^(.+):(\d+)$/.exec(resume);
  const zongji = new ZongJi(o.url);
  const queue: Array<{ batch: ChangeBatch; resume: string }> = [];
  let file = at?.[1] ?? '';
  let ids = new Set<string>();
  let draining = false;
  let broken = false;
  let reject: (err: unknown) => void = () => {};
  const failed = new Promise<never>((_, r) => {
    reject = r;
  });
  failed.catch(() => {});
  const fail = (err: unknown) => {
    broken = true;
    reject(err);
  };
  const drain = async () => {
    if (draining || broken) return;
    draining = true;
    try {
      for (let item = queue.shift(); item !== undefined; item = queue.shift()) {
        if (signal.aborted || broken) return;
        await sink.apply(item.batch);
        await o.valkey.set(resumeKey, item.resume);
      }
    } catch (err) {
      fail(err);
    } finally {
      draining = false;
    }
  };
  /** A commit (or a TRUNCATE, committed on its own) ends at `next` in `file`: queue what it changed. */
  const commit = (truncated: boolean, next: number, commitTimeMs: number) => {
    queue.push({
      batch: { ids, truncated, position: binlogPosition(file, next), commitTimeMs },
      resume: `${file}:${next}`,
    });
    ids = new Set();
    void drain();
  };
  const idsOf = (e: AnyBinlogEvent) => {
    const { tableId, tableMap } = e as unknown as {
      tableId: number;
      tableMap: Record<number, { parentSchema: string; tableName: string }>;
    };
    const table = tableMap?.[tableId];
    const column =
      table === undefined ? undefined : watched.get(`${table.parentSchema}.${table.tableName}`);
    if (column === undefined) return;
    for (const row of (e as unknown as Rows).rows) {
      const images = e.getEventName() === 'updaterows' ? [row.before, row.after] : [row];
      for (const image of images as Array<Record<string, unknown> | undefined>) {
        const id = image?.[column];
        if (id !== undefined && id !== null) ids.add(String(id));
      }
    }
  };
  zongji.on('binlog', (e: AnyBinlogEvent) => {
    switch (e.getEventName()) {
      case 'rotate':
        file = (e as { binlogName: string }).binlogName;
        break;
      case 'writerows':
      case 'updaterows':
      case 'deleterows':
        idsOf(e);
        break;
      case 'query': {
        // TRUNCATE has no row event: the binlog carries it as a statement, committed on its own.
        const truncated = truncatedTable(e as unknown as { query: string; schema: string });
        if (truncated === undefined || !watched.has(truncated)) break;
        commit(true, e.nextPosition, e.timestamp);
        break;
      }
      case 'xid':
        commit(false, e.nextPosition, e.timestamp);
        break;
    }
  });
  zongji.on('error', (err: Error) => fail(err));
  const started = new Promise<void>((resolve) => zongji.once('ready', () => resolve()));
  void started.then(() => sink.started());
  const aborted = new Promise<void>((resolve) => {
    if (signal.aborted) resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
  });
  zongji.start({
    serverId: o.serverId,
    ...(at === undefined || at === null
      ? { startAtEnd: true }
      : { filename: at[1], position: Number(at[2]) }),
    includeEvents: ['rotate', 'tablemap', 'writerows', 'updaterows', 'deleterows', 'query', 'xid'],
  });
  try {
    await Promise.race([aborted, failed]);
  } finally {
    zongji.stop();
  }
}
