/**
 * The store side of the drills: where their stores and services find Valkey, a store or a
 * service config whose table reads the counting origin, and the run's keys in Valkey.
 */
import { Redis } from 'ioredis';
import { spawnCluster } from '../../harness/cluster.js';
import { leaseKey, valueKey } from '../../src/l2/keys.js';
import { httpSource } from '../../src/sources/http.js';
import { createStore, type TableOptions } from '../../src/store/store.js';
import { redactUrl, type ValkeyOptions } from '../../src/valkey/client.js';
import { within } from '../../src/valkey/probe.js';
import { SetupError } from './cli.js';

/** A store with one table, `table`, whose loader GETs the origin's item `template`; `valkey` as `createStore` takes it. */
export async function originStore(
  valkey: string | ValkeyOptions,
  table: string,
  template: string,
  policy: Omit<TableOptions, 'load'> = {},
) {
  const source = httpSource({ url: template, timeoutMs: 10_000 });
  const store = await createStore({
    valkey,
    tables: { [table]: { load: source.load, ...policy } },
  });
  const close = () => store.close().then(() => source.close());
  return { store, close };
}

/**
 * A service config with one table, `table`, whose source GETs the origin's item `template`:
 * `valkey` is its `valkey` section, `policy` the table's, `rest` any other top-level sections
 * (`namespace`, `log`, `http`, …).
 */
export const originConfig = (
  valkey: object,
  table: string,
  template: string,
  policy: object = {},
  rest: object = {},
) => ({
  valkey,
  ...rest,
  tables: { [table]: { source: { kind: 'http', url: template }, ...policy } },
});

/** The `log` section of a service whose warnings are what the drill provokes. */
export const QUIET = { log: { level: 'error' } };

/** Makes Node load `fetch` (undici) now, with a GET the origin answers 404 and does not count. */
export async function loadFetch(template: string): Promise<void> {
  await (await fetch(new URL('/warm-up', template).href)).text();
}

/**
 * A Valkey connection for the drill's own housekeeping (no reconnects).
 *
 * @throws {SetupError} naming the (redacted) URL when it cannot connect.
 */
export async function connectAdmin(url: string): Promise<Redis> {
  const options = { maxRetriesPerRequest: 1, connectTimeout: 3_000, lazyConnect: true };
  let redis: Redis;
  try {
    redis = new Redis(url, { ...options, commandTimeout: 10_000, retryStrategy: () => null });
  } catch (err) {
    throw new SetupError(`--valkey ${redactUrl(url)}: ${(err as Error).message}`);
  }
  let last: unknown;
  redis.on('error', (err) => {
    last = err;
  });
  // connectTimeout covers the TCP connect only: a server that accepts and never answers
  // would hold the ready check forever.
  const ready = await within(
    redis.connect().then(() => true),
    5_000,
  ).catch((err: unknown) => {
    const why = ((last ?? err) as Error).message;
    throw new SetupError(`no Valkey/Redis at ${redactUrl(url)}: ${why}`);
  });
  if (ready === undefined) {
    redis.disconnect();
    throw new SetupError(`no Valkey/Redis at ${redactUrl(url)}: no answer within 5 s`);
  }
  return redis;
}

/** Deletes every key of `table` (`ecc:<table>:*`); the number deleted. */
export async function dropTable(redis: Redis, table: string): Promise<number> {
  let dropped = 0;
  const stream = redis.scanStream({ match: `ecc:${table}:*`, count: 1000 });
  for await (const keys of stream as AsyncIterable<string[]>) {
    if (keys.length > 0) dropped += await redis.unlink(...keys);
  }
  return dropped;
}

/** The Valkey a drill runs against (see {@link drillValkey}). */
export type DrillValkey = Awaited<ReturnType<typeof drillValkey>>;

/**
 * The drill's Valkey: the server at `url` (which must answer), or with `cluster` a local 3+3
 * cluster it starts and stops (harness/cluster.ts; `secure`: harness/secure.ts). `target` is
 * `createStore`'s `valkey` option (JSON: it travels to forked workers), `section` a service
 * config's, `label` what the report names; `drop(table, ids)` deletes the run's keys from the
 * server (a cluster goes with its keys).
 *
 * @throws {Error} when the server does not answer, the cluster does not form, or `secure` is
 *   asked without `cluster`.
 */
export async function drillValkey(url: string, cluster: boolean, secure = false) {
  if (secure && !cluster) throw new SetupError('--secure needs --cluster');
  if (!cluster) {
    const admin = await connectAdmin(url);
    return {
      ...{ target: url as string | ValkeyOptions, section: { url }, label: redactUrl(url) },
      drop: (table: string, ids: string[]) =>
        Promise.all(ids.map((id) => admin.del(valueKey(table, id), leaseKey(table, id)))),
      close: async () => admin.disconnect(),
    };
  }
  const local = await spawnCluster({ secure });
  const tls = local.secure === undefined ? '' : ', TLS + ACL user';
  return {
    target: local.valkey as string | ValkeyOptions,
    section: { ...local.valkey },
    label: `cluster 3+3${tls} (${local.seeds.join(', ')})`,
    drop: async (_table: string, _ids: string[]) => [],
    close: () => local.stop(),
  };
}
