/**
 * One instance of the expiry drill, forked by `drills/expiry.ts`. It creates
 * a store on the drill's origin, waits for `go`, then runs `clients` loops
 * that each call `table.get(id)` back to back (with `pauseMs` between reads)
 * until `stopAtMs`. Every read is recorded (when, how long, stale, layer,
 * which value, whether it waited on the loader); the worker reports a
 * {@link WorkerResult} summary.
 */
import { setTimeout as sleep, setImmediate as yieldTurn } from 'node:timers/promises';
import { byLabels, type MetricSample, parseMetrics } from '../harness/metrics.js';
import type { Table } from '../src/store/table.js';
import { ReadLog, type ReadSummary } from './lib/expiry-reads.js';
import { errorCode } from './lib/http.js';
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

/** Worker → parent: the run as one instance saw it. */
export interface WorkerResult extends ReadSummary {
  pid: number;
  /** Cumulative refresh counters sampled every {@link SAMPLE_MS}: [epoch ms, early, stale]. */
  refreshSamples: Array<[number, number, number]>;
  /** The store's own counters at the end, by metric and label. */
  metrics: Record<string, Record<string, number>>;
}

/** Reads that waited or failed, reported one by one per instance; beyond this only counted. */
const MAX_SLOW_READS = 2_000;
const SAMPLE_MS = 20;
const REFRESHES = 'echostore_refreshes_total';
const REPORTED_METRICS = [
  REFRESHES,
  'echostore_refresh_failures_total',
  'echostore_lease_total',
  'echostore_coherence_total',
  'echostore_fills_total',
  'echostore_coalesced_total',
  'echostore_reads_total',
  'echostore_load_errors_total',
];

async function clientLoop(t: Table, setup: Setup, stopAtMs: number, log: ReadLog): Promise<void> {
  while (Date.now() < stopAtMs) {
    const atMs = Date.now();
    const started = performance.now();
    try {
      const r = await t.get(setup.id);
      const ms = performance.now() - started;
      log.add(atMs, ms, r, r.layer === 'origin' || ms >= setup.waitedAtMs);
    } catch (err) {
      const ms = performance.now() - started;
      const code = errorCode(err) ?? String((err as Error)?.name ?? 'Error');
      log.add(atMs, ms, undefined, ms >= setup.waitedAtMs, code);
    }
    // An L1 hit resolves at once: without a pause the loops would starve the event loop.
    if (setup.pauseMs > 0) await sleep(setup.pauseMs);
    else await yieldTurn();
  }
}

runWorker<Setup, ExpiryGo>(async (setup) => {
  const { store, close } = await originStore(
    setup.valkey,
    setup.table,
    setup.template,
    setup.policy,
  );
  const t = store.table(setup.table);
  await loadFetch(setup.template);
  const counter = (samples: MetricSample[], name: string) => byLabels(samples, name, setup.table);
  const run = async ({ stopAtMs }: ExpiryGo): Promise<WorkerResult> => {
    const log = new ReadLog(MAX_SLOW_READS);
    const refreshSamples: Array<[number, number, number]> = [];
    const sample = async () => {
      const text = await store.registry.getSingleMetricAsString(REFRESHES);
      const r = counter(parseMetrics(text), REFRESHES);
      refreshSamples.push([Date.now(), r.early ?? 0, r.stale ?? 0]);
    };
    await sample();
    const sampler = setInterval(() => void sample(), SAMPLE_MS);
    try {
      await Promise.all(
        Array.from({ length: setup.clients }, () => clientLoop(t, setup, stopAtMs, log)),
      );
    } finally {
      clearInterval(sampler);
    }
    await sample();
    const samples = parseMetrics(await store.registry.metrics());
    const metrics = Object.fromEntries(REPORTED_METRICS.map((n) => [n, counter(samples, n)]));
    return { pid: process.pid, ...log.summary(), refreshSamples, metrics };
  };
  return { run, close };
});
