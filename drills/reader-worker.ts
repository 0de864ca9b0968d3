/**
 * One instance of the regimes or the storm drill, forked by the drill: it gets ready (a store
 * on the origin, or connections to its service), waits for `go`, then makes `reads` reads from
 * `lanes` loops at the appointed moment, and reports what it got ({@link ReadsResult}).
 */
import type { TableOptions } from '../src/store/store.js';
import type { ValkeyOptions } from '../src/valkey/client.js';
import { httpRead, type ReadsResult, readMany, storeRead } from './lib/burst.js';
import { loadFetch, originStore } from './lib/store.js';
import { runWorker } from './lib/workers.js';
import { zipfSampler } from './lib/zipf.js';

export type { ReadsResult };

/** What the worker is told to do: the first message from the parent. */
export interface ReaderSetup {
  kind: 'setup';
  table: string;
  reads: number;
  lanes: number;
  /** Every read is of `id`; or with `zipf`, of `<prefix><k>`, k drawn from 1…keys, seeded. */
  id?: string;
  zipf?: { prefix: string; keys: number; s: number; seed: number };
  /** A store in this process: `createStore`'s `valkey`, the origin's item URL template, the table policy. */
  valkey?: string | ValkeyOptions;
  template?: string;
  policy?: Omit<TableOptions, 'load'>;
  /** Or GETs against this service instance. */
  serviceUrl?: string;
}

runWorker<ReaderSetup>(async (setup) => {
  const { table, reads, lanes, zipf } = setup;
  const draw = zipf && zipfSampler(zipf.keys, zipf.s, zipf.seed);
  const next = () => (draw ? `${zipf?.prefix}${draw()}` : (setup.id as string));
  const base = setup.serviceUrl;
  if (base !== undefined) {
    // Open the connections now, so the reads measure the store, not TCP handshakes.
    const open = async () => (await fetch(`${base}/healthz`)).text();
    await Promise.all(Array.from({ length: lanes }, open));
    const run = () => readMany(httpRead(base, table), next, reads, lanes);
    return { run, close: async () => {} };
  }
  const template = setup.template as string;
  const { store, close } = await originStore(setup.valkey ?? '', table, template, setup.policy);
  await loadFetch(template);
  return { run: () => readMany(storeRead(store.table(table)), next, reads, lanes), close };
});
