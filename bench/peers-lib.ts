/**
 * The caches `bench:peers` compares, behind one shape: `get(id)` reads through the cache with the
 * same loader, `close()` lets go of every connection. Each peer's configuration:
 * drills/README.md#benchpeers.
 */
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { createCache } from 'async-cache-dedupe';
import { BentoCache, bentostore } from 'bentocache';
import { memoryDriver } from 'bentocache/drivers/memory';
import { redisBusDriver, redisDriver } from 'bentocache/drivers/redis';
import { Redis } from 'ioredis';
import { createStore } from '../src/store/store.js';

export type PeerName = 'echostore' | 'async-cache-dedupe' | 'bentocache';
export const PEERS: PeerName[] = ['echostore', 'async-cache-dedupe', 'bentocache'];

/** A cache under test. */
export interface Peer {
  get(id: string): Promise<unknown>;
  close(): Promise<void>;
}

/** What every peer gets: the same loader, Redis and namespace. */
export interface PeerOptions {
  valkey: string;
  /** Keys of one run live under this tag (a table name for echostore). */
  tag: string;
  load: (id: string) => Promise<unknown> | unknown;
  /** async-cache-dedupe only: `memory`, its in-process storage (the warm-get figure), no Redis. */
  storage?: 'redis' | 'memory';
  /** echostore only: policy fields for the table. */
  policy?: Record<string, unknown>;
}

const TTL_S = 300;

/**
 * Builds `name` on `options`, each on its best coalescing: echostore's L1, single-flight and
 * lease; async-cache-dedupe's Redis storage and dedupe; bentocache's L1 + L2 + bus and its lock
 * per key. Resolves once it can answer.
 */
export async function makePeer(name: PeerName, options: PeerOptions): Promise<Peer> {
  const { valkey, tag, load } = options;
  if (name === 'echostore') {
    const store = await createStore({
      valkey,
      tables: { [tag]: { load: (id) => load(id), ttlMs: TTL_S * 1000, ...options.policy } },
    });
    const t = store.table(tag);
    return { get: (id) => t.get(id), close: () => store.close() };
  }
  if (name === 'async-cache-dedupe') {
    const client = options.storage === 'memory' ? undefined : new Redis(valkey);
    const cache = createCache({
      ttl: TTL_S,
      storage:
        client === undefined
          ? { type: 'memory', options: { size: 1_000_000 } }
          : { type: 'redis', options: { client, invalidation: false } },
    });
    cache.define(tag, async (id: string) => load(id));
    const get = (cache as unknown as Record<string, (id: string) => Promise<unknown>>)[tag];
    if (get === undefined) throw new Error('async-cache-dedupe did not define the function');
    await client?.ping();
    return { get, close: async () => client?.disconnect() };
  }
  const url = new URL(valkey);
  const connection = { host: url.hostname, port: Number(url.port || 6379) };
  const store = bentostore()
    .useL1Layer(memoryDriver({ maxItems: 1_000_000 }))
    .useL2Layer(redisDriver({ connection }))
    .useBus(redisBusDriver({ connection }));
  const bento = new BentoCache({ default: 'multi', prefix: tag, stores: { multi: store } });
  // The first call opens the connections; a key no run reads.
  await bento.getOrSet({ key: `${tag}-open`, factory: () => 1, ttl: '1m' });
  return {
    get: (id) => bento.getOrSet({ key: id, factory: () => load(id), ttl: `${TTL_S}s` }),
    close: () => bento.disconnectAll(),
  };
}

/** `name@version` as installed (in the repository's node_modules; `name@?` when it cannot be read). */
export function versionOf(name: string): string {
  const file = new URL(`../../node_modules/${name}/package.json`, import.meta.url);
  try {
    return `${name}@${(JSON.parse(readFileSync(file, 'utf8')) as { version?: string }).version}`;
  } catch {
    return `${name}@?`;
  }
}

/** The bench's source of truth: a sleep of `latencyMs`; each read's duration kept, ms. */
export function sleepLoader(latencyMs: number) {
  const durationsMs: number[] = [];
  return {
    durationsMs,
    load: async (id: string) => {
      const started = performance.now();
      await sleep(latencyMs);
      durationsMs.push(performance.now() - started);
      return { id, name: `product ${id}`, price_cents: 1234, tags: ['a', 'b'] };
    },
  };
}
