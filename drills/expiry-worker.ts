/**
 * One instance of the expiry drill, run by `drills/expiry.ts` with
 * `child_process.fork`. Over IPC it receives a {@link Setup}, creates a store
 * on the drill's origin, answers `ready`, waits for `go`, then runs `clients`
 * loops that each call `table.get(id)` back to back (with `pauseMs` between
 * reads) until `stopAtMs`. Every read is recorded (when, how long, stale,
 * source, which value, whether it waited on the loader); the worker reports a
 * {@link WorkerResult} summary, closes the store and exits.
 */
import { setTimeout as sleep, setImmediate as yieldTurn } from 'node:timers/promises';
import type { Registry } from 'prom-client';
import { httpSource } from '../src/sources/http.js';
import { createStore } from '../src/store/store.js';
import type { Table } from '../src/store/table.js';
import { ReadLog, type ReadSummary, summarize } from './lib/expiry-reads.js';
import { fromParent, sendToParent } from './lib/workers.js';

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

/** Parent → worker. */
export type ToWorker = Setup | { kind: 'go'; atMs: number; stopAtMs: number };

/** Worker → parent: the run as one instance saw it. */
export interface WorkerResult extends ReadSummary {
  kind: 'result';
  pid: number;
  /** Cumulative refresh counters sampled every {@link SAMPLE_MS}: [epoch ms, early, stale]. */
  refreshSamples: Array<[number, number, number]>;
  /** The store's own counters at the end, by metric and label. */
  metrics: Record<string, Record<string, number>>;
}

/** Worker → parent. */
export type FromWorker = { kind: 'ready' } | WorkerResult | { kind: 'error'; message: string };

/** Reads that waited or failed, reported one by one per instance; beyond this only counted. */
const MAX_SLOW_READS = 2_000;
const SAMPLE_MS = 20;
const REPORTED_METRICS = [
  'echostore_refreshes_total',
  'echostore_refresh_failures_total',
  'echostore_lease_total',
  'echostore_coherence_total',
  'echostore_fills_total',
  'echostore_coalesced_total',
  'echostore_reads_total',
  'echostore_load_errors_total',
];

/** A counter's values for `table`, keyed by its other labels' values (`''` when it has none). */
async function counterValues(
  registry: Registry,
  name: string,
  table: string,
): Promise<Record<string, number>> {
  const metric = registry.getSingleMetric(name);
  if (metric === undefined) return {};
  const out: Record<string, number> = {};
  for (const v of (await metric.get()).values) {
    if (v.labels.table !== table) continue;
    const key = Object.entries(v.labels)
      .filter(([k]) => k !== 'table')
      .map(([, x]) => String(x))
      .join(',');
    out[key] = (out[key] ?? 0) + Number(v.value);
  }
  return out;
}

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
      const e = err as { code?: unknown; name?: unknown };
      const code = typeof e?.code === 'string' ? e.code : String(e?.name ?? 'Error');
      log.add(atMs, ms, undefined, ms >= setup.waitedAtMs, code);
    }
    // An L1 hit resolves at once: without a pause the loops would starve the event loop.
    if (setup.pauseMs > 0) await sleep(setup.pauseMs);
    else await yieldTurn();
  }
}

/** The first message of `kind` from the parent. */
const waitFor = <K extends ToWorker['kind']>(kind: K) => fromParent<ToWorker, K>(kind);

/** Sends one of this worker's messages; resolves once it is handed to the IPC channel. */
const send = (message: FromWorker): Promise<void> => sendToParent(message);

async function main(): Promise<void> {
  if (process.send === undefined) throw new Error('run me with child_process.fork (IPC)');
  // The parent went away: nothing left to report to.
  process.once('disconnect', () => process.exit(3));
  const setup = await waitFor('setup');
  const go = waitFor('go');
  const source = httpSource({ url: setup.template, timeoutMs: 10_000 });
  const store = await createStore({
    valkey: setup.valkey,
    tables: { [setup.table]: { load: source.load, ...setup.policy } },
  });
  try {
    const t = store.table(setup.table);
    // Node loads fetch (undici) on first use: do it now, with a GET the origin answers 404 and does not count.
    await (await fetch(new URL('/warm-up', setup.template).href)).text();
    await send({ kind: 'ready' });
    const { atMs, stopAtMs } = await go;
    await sleep(Math.max(0, atMs - Date.now()));
    const log = new ReadLog();
    const refreshSamples: Array<[number, number, number]> = [];
    const sample = async () => {
      const r = await counterValues(store.registry, 'echostore_refreshes_total', setup.table);
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
    const metrics: Record<string, Record<string, number>> = {};
    for (const name of REPORTED_METRICS) {
      metrics[name] = await counterValues(store.registry, name, setup.table);
    }
    await send({
      kind: 'result',
      pid: process.pid,
      ...summarize(log, MAX_SLOW_READS),
      refreshSamples,
      metrics,
    });
  } finally {
    await store.close();
    source.close();
  }
}

main().then(
  () => process.exit(0),
  async (err: unknown) => {
    await send({ kind: 'error', message: (err as Error)?.stack ?? String(err) });
    process.exit(2);
  },
);
