/**
 * One instance of the expiry drill, forked by `drills/expiry.ts`. It creates a store on the
 * drill's origin, waits for `go`, then runs `clients` loops that each call `table.get(id)` back
 * to back (`pauseMs` between reads) until `stopAtMs`. Its reads (a few hundred thousand) are
 * summarised as they happen ({@link readLog}); it reports a {@link WorkerResult}.
 */
import { setTimeout as sleep, setImmediate as yieldTurn } from 'node:timers/promises';
import { byLabels, parseMetrics } from '../harness/metrics.js';
import type { TableOptions } from '../src/store/store.js';
import type { ReadResult } from '../src/store/types.js';
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
export interface ExpiryGo extends Go {
  stopAtMs: number;
}

/** Worker → parent: the run as one instance saw it. */
export type WorkerResult = ReturnType<ReturnType<typeof readLog>['summary']> & {
  pid: number;
  /** The store's own counters at the end, by metric and label. */
  metrics: Record<string, Record<string, number>>;
};

const REPORTED_METRICS = [
  ...['echostore_refreshes_total', 'echostore_refresh_failures_total', 'echostore_lease_total'],
  ...['echostore_coherence_total', 'echostore_fills_total', 'echostore_coalesced_total'],
  ...['echostore_reads_total', 'echostore_load_errors_total'],
];

/**
 * One instance's reads: `add` each (one that started at `atMs`, epoch, and took `ms`; `r`
 * undefined when it failed with `code`); `summary` gives, per value generation (the origin's
 * read number the value carries), its soft expiry (answer time + ttlMs, as its first reader saw
 * it, epoch ms) and the reads answered with it stale (and the last of them), and every read that
 * waited on the loader or failed (`gen` 0, `source` `error`), the first 2,000 in order.
 */
function readLog(waitedAtMs: number) {
  const all: number[] = [];
  type Generation = { gen: number; softAtMs: number; stale: number; lastStaleAtMs?: number };
  const gens = new Map<number, Generation>();
  type Slow = { atMs: number; ms: number; source: string; gen: number; stale: boolean };
  const slowReads: Array<Slow & { waited: boolean; code: string | undefined }> = [];
  const s = { waited: 0, failures: 0, errorCodes: {} as Record<string, number> };
  const add = (atMs: number, ms: number, r: ReadResult | undefined, code?: string) => {
    const waited = r?.layer === 'origin' || ms >= waitedAtMs;
    all.push(ms);
    if (waited) s.waited++;
    const read = r?.found ? (r.value as { read?: unknown }).read : undefined;
    const gen = typeof read === 'number' ? read : 0;
    const stale = r?.stale ?? false;
    if (r === undefined) {
      s.failures++;
      bump(s.errorCodes, code ?? 'Error');
    }
    if ((waited || r === undefined) && slowReads.length < 2_000) {
      const source = r === undefined ? 'error' : r.layer;
      slowReads.push({ atMs, ms: round(ms), source, gen, stale, waited, code });
    }
    if (r === undefined) return;
    const g = gens.get(gen) ?? { gen, softAtMs: Math.round(atMs + ms + r.ttlMs), stale: 0 };
    gens.set(gen, g);
    if (stale) [g.stale, g.lastStaleAtMs] = [g.stale + 1, atMs];
  };
  const summary = () => {
    const generations = [...gens.values()].sort((a, b) => a.gen - b.gen);
    const m = round(all.reduce((x, y) => Math.max(x, y), 0));
    return { reads: all.length, generations, slowReads, ...s, ...p50p99(all), maxMs: m };
  };
  return { add, summary };
}

runWorker<Setup, ExpiryGo>(async (setup) => {
  const { table, waitedAtMs } = setup;
  const { store, close } = await originStore(setup.valkey, table, setup.template, setup.policy);
  const t = store.table(table);
  await loadFetch(setup.template);
  const log = readLog(waitedAtMs);
  const client = async (stopAtMs: number) => {
    while (Date.now() < stopAtMs) {
      const [atMs, started] = [Date.now(), performance.now()];
      try {
        const r = await t.get(setup.id);
        log.add(atMs, performance.now() - started, r);
      } catch (err) {
        const code = errorCode(err) ?? String((err as Error)?.name ?? 'Error');
        log.add(atMs, performance.now() - started, undefined, code);
      }
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
    return { pid: process.pid, ...log.summary(), metrics };
  };
  return { run, close };
});
