/**
 * The caches `bench:peers` compares, behind one shape: `get(id)` reads through
 * the cache with the same loader, `close()` lets go of every connection.
 *
 * Each peer is configured for its best coalescing, on the same Redis:
 * - **echostore**: L1, single-flight per process, the Valkey lease per fleet
 *   (`coalescing: 'fleet'`, the default policy).
 * - **async-cache-dedupe**: its Redis storage, with its in-process dedupe
 *   (no L1: a hit reads Redis). For the warm-get figure alone it runs on its
 *   memory storage, its only in-process mode.
 * - **bentocache**: its L1 (memory) + L2 (Redis) + bus, with its own stampede
 *   protection (a lock per key in each process).
 */

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createCache } from 'async-cache-dedupe';
import { BentoCache, bentostore } from 'bentocache';
import { memoryDriver } from 'bentocache/drivers/memory';
import { redisBusDriver, redisDriver } from 'bentocache/drivers/redis';
import { Redis } from 'ioredis';
import { mulberry32 } from '../src/random.js';
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
  /** `memory`: no Redis at all where the peer allows it (the warm-get figure). */
  storage?: 'redis' | 'memory';
  /** echostore only: policy fields for the table. */
  policy?: Record<string, unknown>;
}

const TTL_S = 300;

/** Builds `name` on `options`; resolves once it can answer. */
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
    if (client !== undefined) await client.ping();
    return {
      get: (id) => get(id),
      close: async () => {
        client?.disconnect();
      },
    };
  }
  const url = new URL(valkey);
  const connection = { host: url.hostname, port: Number(url.port || 6379) };
  const store = bentostore().useL1Layer(memoryDriver({ maxItems: 1_000_000 }));
  if (options.storage !== 'memory') {
    store.useL2Layer(redisDriver({ connection })).useBus(redisBusDriver({ connection }));
  }
  const bento = new BentoCache({ default: 'multi', prefix: tag, stores: { multi: store } });
  // The first call opens the connections; a key no run reads.
  await bento.getOrSet({ key: `${tag}-open`, factory: () => 1, ttl: '1m' });
  return {
    get: (id) => bento.getOrSet({ key: id, factory: () => load(id), ttl: `${TTL_S}s` }),
    close: () => bento.disconnectAll(),
  };
}

/** `name@version` as installed. */
export function versionOf(name: string): string {
  const require = createRequire(import.meta.url);
  let dir = require.resolve(name);
  // Walk up to the package's own package.json.
  for (;;) {
    const parent = dir.slice(0, dir.lastIndexOf('/'));
    if (parent === dir || parent === '') return `${name}@?`;
    dir = parent;
    try {
      const pkg = JSON.parse(readFileSync(`${dir}/package.json`, 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === name) return `${name}@${pkg.version}`;
    } catch {
      // not here
    }
  }
}

/**
 * The bench's source of truth: a sleep of `latencyMs`, counted, each read's
 * duration kept (the figure subtracted from a herd's p99).
 */
export function sleepLoader(latencyMs: number) {
  const durationsMs: number[] = [];
  return {
    durationsMs,
    load: async (id: string) => {
      const started = performance.now();
      await new Promise((r) => setTimeout(r, latencyMs));
      durationsMs.push(performance.now() - started);
      return { id, name: `product ${id}`, price_cents: 1234, tags: ['a', 'b'] };
    },
  };
}

/** Deterministic uniform randoms in [0, 1) (mulberry32), so every peer reads the same sequence. */
export const seededRandom = mulberry32;

/** `n` key indices in [0, keys) drawn from Zipf(`s`) with `random`. */
export function zipfSequence(n: number, keys: number, s: number, random: () => number): number[] {
  const cdf: number[] = [];
  let sum = 0;
  for (let k = 1; k <= keys; k++) {
    sum += 1 / k ** s;
    cdf.push(sum);
  }
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const u = random() * sum;
    let lo = 0;
    let hi = keys - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cdf[mid] as number) < u) lo = mid + 1;
      else hi = mid;
    }
    out.push(lo);
  }
  return out;
}
