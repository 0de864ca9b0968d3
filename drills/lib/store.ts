/**
 * The store side of the drills: a store whose table reads the counting
 * origin, which layer answered a read, and the run's keys in Valkey.
 */
import { type Cluster, Redis } from 'ioredis';
import { leaseKey, valueKey } from '../../src/l2/keys.js';
import { httpSource } from '../../src/sources/http.js';
import { createStore, type Store, type TableOptions } from '../../src/store/store.js';
import type { ReadResult } from '../../src/store/types.js';
import { redactUrl, type ValkeyOptions } from '../../src/valkey/client.js';

/** The layer that answered a read. */
export type Layer = ReadResult['layer'];

/** A store with one table, `table`, whose loader GETs the origin's item `template`; `valkey` as `createStore` takes it. */
export async function originStore(
  valkey: string | ValkeyOptions,
  table: string,
  template: string,
  policy: Omit<TableOptions, 'load'> = {},
): Promise<{ store: Store; close(): Promise<void> }> {
  const source = httpSource({ url: template, timeoutMs: 10_000 });
  const store = await createStore({
    valkey,
    tables: { [table]: { load: source.load, ...policy } },
  });
  return {
    store,
    async close() {
      await store.close();
      source.close();
    },
  };
}

/**
 * A service config with one table, `table`, whose source GETs the origin's item `template`:
 * `valkey` is its `valkey` section, `policy` the table's, `rest` any other top-level sections
 * (`namespace`, `log`, `http`, …).
 */
export function originConfig(
  valkey: object,
  table: string,
  template: string,
  policy: object = {},
  rest: object = {},
) {
  return {
    valkey,
    ...rest,
    tables: { [table]: { source: { kind: 'http', url: template }, ...policy } },
  };
}

/** The `log` section of a service whose warnings are what the drill provokes. */
export const QUIET = { log: { level: 'error' } };

/** Makes Node load `fetch` (undici) now, with a GET the origin answers 404 and does not count. */
export async function loadFetch(template: string): Promise<void> {
  await (await fetch(new URL('/warm-up', template).href)).text();
}

/**
 * A Valkey connection for the drill's own housekeeping (no reconnects).
 *
 * @throws {Error} naming the (redacted) URL when it cannot connect.
 */
export async function connectAdmin(url: string): Promise<Redis> {
  const redis = new Redis(url, {
    maxRetriesPerRequest: 1,
    connectTimeout: 3_000,
    lazyConnect: true,
    retryStrategy: () => null,
  });
  let last: unknown;
  redis.on('error', (err) => {
    last = err;
  });
  await redis.connect().catch((err: unknown) => {
    throw new Error(`no Valkey/Redis at ${redactUrl(url)}: ${((last ?? err) as Error).message}`);
  });
  return redis;
}

/** Deletes the value and the lease of `id` in `table` (one slot: a cluster client will do). */
export async function dropId(redis: Redis | Cluster, table: string, id: string): Promise<void> {
  await redis.del(valueKey(table, id), leaseKey(table, id));
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
