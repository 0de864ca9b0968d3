/**
 * One instance of the expiry drill, forked by `drills/expiry.ts`. It creates a store on the
 * drill's origin, waits for `go`, then runs `clients` loops that each call `table.get(id)` back
 * to back (`pauseMs` between reads) until `stopAtMs`. Its reads (a few hundred thousand) are
 * summarised as they happen: per value generation (the origin's read number the value carries),
 * and every read that waited on the loader or failed; it reports a {@link WorkerResult}.
 */
import { setTimeout as sleep, setImmediate as yieldTurn } from 'node:timers/promises';
import { byLabels, parseMetrics } from '../harness/metrics.js';
import type { ReadResult } from '../src/store/types.js';
import { errorCode } from './lib/http.js';
import { bump, p50p99, round } from './lib/report.js';
import { loadFetch, originStore } from './lib/store.js';
import { type Go, runWorker } from './lib/workers.js';

/** The freshness policy under test; the same in every instance (and in the parent's warm-up). */
export interface ExpiryPolicy {
  ttlMs: number;
  staleMs: number;
  jitter: number;
  earlyRefreshBeta: number;
  l1: { ttlMs: number };
}

/** What the worker is told to do: the first message from the parent. */
export interface Setup {
  kind: 'setup';
  table: string;
  id: string;
  /** The origin's item URL template. */
  template: string;
  valkey: string;
  policy: ExpiryPolicy;
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

/** What one instance's reads saw of one value (generation `gen`). */
export interface GenerationSeen {
  gen: number;
  /** Soft expiry of this value, epoch ms (as its first reader computed it: answer time + ttlMs). */
  softAtMs: number;
  /** Reads answered with it stale, and the last of them, epoch ms. */
  stale: number;
  lastStaleAtMs: number | undefined;
}

/** A read that waited on the loader, or failed (then `gen` 0 and `source` `error`). */
export interface SlowRead {
  atMs: number;
  ms: number;
  source: ReadResult['layer'] | 'error';
  gen: number;
  stale: boolean;
  waited: boolean;
  code: string | undefined;
}

/** Worker → parent: the run as one instance saw it. */
export interface WorkerResult {
  pid: number;
  reads: number;
  generations: GenerationSeen[];
  /** Reads that waited or failed, in order; at most {@link MAX_SLOW_READS}. */
  slowReads: SlowRead[];
  waited: number;
  failures: number;
  errorCodes: Record<string, number>;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Cumulative refresh counters sampled every {@link SAMPLE_MS}: [epoch ms, early, stale]. */
  refreshSamples: Array<[number, number, number]>;
  /** The store's own counters at the end, by metric and label. */
  metrics: Record<string, Record<string, number>>;
}

const MAX_SLOW_READS = 2_000;
const SAMPLE_MS = 20;
const REFRESHES = 'echostore_refreshes_total';
const REPORTED_METRICS = [
  ...[REFRESHES, 'echostore_refresh_failures_total', 'echostore_lease_total'],
  ...['echostore_coherence_total', 'echostore_fills_total', 'echostore_coalesced_total'],
  ...['echostore_reads_total', 'echostore_load_errors_total'],
];

runWorker<Setup, ExpiryGo>(async (setup) => {
  const { table, policy, waitedAtMs } = setup;
  const { store, close } = await originStore(setup.valkey, table, setup.template, policy);
  const t = store.table(table);
  await loadFetch(setup.template);
  const ms: number[] = [];
  const gens = new Map<number, GenerationSeen>();
  const s = { slowReads: [] as SlowRead[], waited: 0, failures: 0, errorCodes: {} };
  /** One read that started at `atMs` (epoch) and took `took`; `r` undefined when it failed with `code`. */
  const add = (atMs: number, took: number, r: ReadResult | undefined, code?: string) => {
    const waited =
      r === undefined ? took >= waitedAtMs : r.layer === 'origin' || took >= waitedAtMs;
    ms.push(took);
    if (waited) s.waited++;
    const read = r?.found ? (r.value as { read?: unknown }).read : undefined;
    const gen = typeof read === 'number' ? read : 0;
    const stale = r?.stale ?? false;
    if (r === undefined) {
      s.failures++;
      bump(s.errorCodes, code ?? 'Error');
    }
    if ((waited || r === undefined) && s.slowReads.length < MAX_SLOW_READS) {
      const source = r === undefined ? 'error' : r.layer;
      s.slowReads.push({ atMs, ms: round(took), source, gen, stale, waited, code });
    }
    if (r === undefined) return;
    const softAtMs = Math.round(atMs + took + r.ttlMs);
    const g = gens.get(gen) ?? { gen, softAtMs, stale: 0, lastStaleAtMs: undefined };
    gens.set(gen, g);
    if (stale) {
      g.stale++;
      g.lastStaleAtMs = atMs;
    }
  };
  const client = async (stopAtMs: number) => {
    while (Date.now() < stopAtMs) {
      const atMs = Date.now();
      const started = performance.now();
      try {
        const r = await t.get(setup.id);
        add(atMs, performance.now() - started, r);
      } catch (err) {
        const code = errorCode(err) ?? String((err as Error)?.name ?? 'Error');
        add(atMs, performance.now() - started, undefined, code);
      }
      // An L1 hit resolves at once: without a pause the loops would starve the event loop.
      await (setup.pauseMs > 0 ? sleep(setup.pauseMs) : yieldTurn());
    }
  };
  const run = async ({ stopAtMs }: ExpiryGo): Promise<WorkerResult> => {
    const refreshSamples: Array<[number, number, number]> = [];
    const sample = async () => {
      const text = await store.registry.getSingleMetricAsString(REFRESHES);
      const r = byLabels(parseMetrics(text), REFRESHES, table);
      refreshSamples.push([Date.now(), r.early ?? 0, r.stale ?? 0]);
    };
    await sample();
    const sampler = setInterval(() => void sample(), SAMPLE_MS);
    await Promise.all(Array.from({ length: setup.clients }, () => client(stopAtMs))).finally(() =>
      clearInterval(sampler),
    );
    await sample();
    const samples = parseMetrics(await store.registry.metrics());
    const metrics = Object.fromEntries(
      REPORTED_METRICS.map((n) => [n, byLabels(samples, n, table)]),
    );
    const generations = [...gens.values()].sort((a, b) => a.gen - b.gen);
    const maxMs = round(ms.reduce((m, x) => Math.max(m, x), 0));
    const summary = { reads: ms.length, generations, ...s, ...p50p99(ms), maxMs };
    return { pid: process.pid, ...summary, refreshSamples, metrics };
  };
  return { run, close };
});
