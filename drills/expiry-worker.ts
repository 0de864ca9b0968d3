/**
 * One instance of the expiry drill, forked by `drills/expiry.ts`. It creates a store on the
 * drill's origin, waits for `go`, then runs `clients` loops that each call `table.get(id)` back
 * to back (`pauseMs` between reads) until `stopAtMs`. Its reads (a few hundred thousand) are
 * summarised as they happen; it reports a {@link WorkerResult}.
 */
import { setTimeout as sleep, setImmediate as yieldTurn } from 'node:timers/promises';
import { byLabels, parseMetrics } from '../harness/metrics.js';
import type { TableOptions } from '../src/store/store.js';
import { errorCode } from './lib/http.js';
import { bump, p50p99, round } from './lib/report.js';
import { loadFetch, originStore } from './lib/store.js';
import { type Go, runWorker } from './lib/workers.js';

/** What the worker is told to do: the first message from the parent. */
export interface Setup {
  kind: 'setup';
  table: string;
  id: string;
  /** The origin's item URL template, the Valkey URL, the table's freshness policy. */
  template: string;
  valkey: string;
  policy: Omit<TableOptions, 'load'>;
  clients: number;
  /** Pause between two reads of one loop, ms; 0 yields one event-loop turn. */
  pauseMs: number;
  /** The origin's latency: a read at least this slow waited on the loader. */
  waitedAtMs: number;
}

/** Parent → worker after `ready`: start reading at `atEpochMs`, stop at `stopAtMs` (epoch ms). */
export type ExpiryGo = Go & { stopAtMs: number };

/** A value generation (the origin's read number it carries): its soft expiry as its first reader saw it, and its stale answers. */
type Generation = { gen: number; softAtMs: number; stale: number; lastStaleAtMs?: number };

/**
 * Worker → parent: the run as one instance saw it. `waitedReads`: the first 2,000 reads that
 * waited on the loader (started at `atMs`, epoch; a failed one has `gen` 0, `source` `error`).
 */
export interface WorkerResult {
  reads: number;
  generations: Generation[];
  waitedReads: Array<{ atMs: number; source: string; gen: number }>;
  waited: number;
  failures: number;
  errorCodes: Record<string, number>;
  p99Ms: number;
  maxMs: number;
  /** The store's own counters at the end, by metric and label. */
  metrics: Record<string, Record<string, number>>;
}

const REPORTED_METRICS = ['refreshes', 'refresh_failures', 'lease', 'coherence', 'fills']
  .concat(['coalesced', 'reads', 'load_errors'])
  .map((name) => `echostore_${name}_total`);

runWorker<Setup, ExpiryGo>(async (setup) => {
  const { table, waitedAtMs } = setup;
  const { store, close } = await originStore(setup.valkey, table, setup.template, setup.policy);
  const t = store.table(table);
  await loadFetch(setup.template);
  const allMs: number[] = [];
  const gens = new Map<number, Generation>();
  const waitedReads: WorkerResult['waitedReads'] = [];
  const errorCodes: Record<string, number> = {};
  let [waited, failures] = [0, 0];
  const read = async () => {
    const [atMs, started] = [Date.now(), performance.now()];
    const got = await t.get(setup.id).catch((err: unknown) => {
      failures++;
      bump(errorCodes, errorCode(err) ?? String((err as Error)?.name ?? 'Error'));
    });
    const ms = performance.now() - started;
    allMs.push(ms);
    const n = got?.found ? (got.value as { read?: unknown }).read : undefined;
    const gen = typeof n === 'number' ? n : 0;
    if (got?.layer === 'origin' || ms >= waitedAtMs) {
      waited++;
      if (waitedReads.length < 2_000)
        waitedReads.push({ atMs, source: got?.layer ?? 'error', gen });
    }
    if (got === undefined) return;
    const g = gens.get(gen) ?? { gen, softAtMs: Math.round(atMs + ms + got.ttlMs), stale: 0 };
    gens.set(gen, g);
    if (got.stale) [g.stale, g.lastStaleAtMs] = [g.stale + 1, atMs];
  };
  const client = async (stopAtMs: number) => {
    while (Date.now() < stopAtMs) {
      await read();
      // An L1 hit resolves at once: without a pause the loops would starve the event loop.
      await (setup.pauseMs > 0 ? sleep(setup.pauseMs) : yieldTurn());
    }
  };
  const run = async ({ stopAtMs }: ExpiryGo): Promise<WorkerResult> => {
    await Promise.all(Array.from({ length: setup.clients }, () => client(stopAtMs)));
    const samples = parseMetrics(await store.registry.metrics());
    const metrics = Object.fromEntries(
      REPORTED_METRICS.map((n) => [n, byLabels(samples, n, table)]),
    );
    const generations = [...gens.values()].sort((a, b) => a.gen - b.gen);
    const [{ p99Ms }, maxMs] = [p50p99(allMs), round(allMs.reduce((m, x) => Math.max(m, x), 0))];
    const counts = { reads: allMs.length, waited, failures, errorCodes };
    return { ...counts, generations, waitedReads, p99Ms, maxMs, metrics };
  };
  return { run, close };
});
