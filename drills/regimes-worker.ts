/**
 * One instance of the regimes drill, forked by `drills/regimes.ts`. It gets
 * ready (`inproc`: creates a store on the origin and loads `fetch`; `http`:
 * opens `readers` keep-alive connections to its service), waits for `go`,
 * fires `readers` concurrent cold reads of one id at the appointed moment, and
 * reports a {@link BurstResult}.
 */
import type { ValkeyOptions } from '../src/valkey/client.js';
import { burst, httpRead, type Read, storeRead } from './lib/burst.js';
import { itemUrl } from './lib/http.js';
import { loadFetch, originStore } from './lib/store.js';
import { runWorker } from './lib/workers.js';

/** What the worker is told to do: the first message from the parent. */
export interface Setup {
  kind: 'setup';
  /** `inproc`: a store in this process; `http`: GETs against `serviceUrl`. */
  via: 'inproc' | 'http';
  coalescing: 'none' | 'process' | 'fleet';
  table: string;
  id: string;
  readers: number;
  /** The table policy besides `coalescing` (the same for every regime). */
  policy: RegimePolicy;
  /** `createStore`'s `valkey` option: a URL, or `{ cluster }` (`inproc`). */
  valkey: string | ValkeyOptions;
  /** The origin's item URL template (`inproc`). */
  template: string;
  /** Base URL of this worker's service instance (`http`). */
  serviceUrl?: string;
}

/** The policy fields the drill sets on every regime's table. */
export interface RegimePolicy {
  loadTimeoutMs: number;
  leaseMs: number;
  waitTimeoutMs: number;
  maxConcurrentLoads: number;
  initialConcurrentLoads: number;
}

runWorker<Setup>(async (setup) => {
  const { table, id, readers } = setup;
  const fire = (read: Read) => () => burst(read, readers);
  if (setup.via === 'http') {
    const base = setup.serviceUrl as string;
    // Open the burst's connections now, so the burst measures the store, not TCP handshakes.
    await Promise.all(
      Array.from({ length: readers }, async () => (await fetch(`${base}/healthz`)).text()),
    );
    return { run: fire(httpRead(itemUrl(base, table, id))), close: async () => {} };
  }
  const policy = { coalescing: setup.coalescing, ...setup.policy };
  const { store, close } = await originStore(setup.valkey, table, setup.template, policy);
  await loadFetch(setup.template);
  return { run: fire(storeRead(store.table(table), id)), close };
});
