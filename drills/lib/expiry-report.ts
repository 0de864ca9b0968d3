/**
 * The expiry drill's judgement: places every source read (stamped by the
 * origin) and every instance's reads on the timeline of the values they
 * produced and saw, and checks the freshness law per expiry.
 *
 * A value is a *generation*: the origin's read number `n` that produced it
 * (the answer carries it). Source read `n` refreshed the newest generation
 * answered before it arrived; the law is at most one such read per
 * generation, i.e. one source read per expiry across the fleet.
 */

import type { StampedRead } from '../../harness/origin.js';
import type { WorkerResult } from '../expiry-worker.js';
import { addCounts, bump, columns } from './report.js';

/** What the drill was asked to do. */
export interface ExpiryPlan {
  instances: number;
  clients: number;
  expiries: number;
  ttlMs: number;
  staleMs: number;
  beta: number;
  latencyMs: number;
  pauseMs: number;
}

/**
 * Judges the run. `t0Ms` is the warm-up fill (the first source read's answer),
 * `stopAtMs` when the clients stopped; both epoch ms.
 */
export function judgeExpiry(
  plan: ExpiryPlan,
  reads: StampedRead[],
  workers: WorkerResult[],
  t0Ms: number,
  stopAtMs: number,
  runMs: number,
) {
  const answered = (r: StampedRead) => r.answeredAtMs ?? r.arrivedAtMs + plan.latencyMs;
  const byN = new Map(reads.map((r) => [r.n, r]));
  // The newest generation answered at or before `atMs`.
  const currentAt = (atMs: number) => {
    let gen = 1;
    for (const r of reads) if (answered(r) <= atMs && r.n > gen) gen = r.n;
    return gen;
  };
  const replaces = new Map<number, number>();
  for (const r of reads) if (r.n > 1) replaces.set(r.n, currentAt(r.arrivedAtMs));
  const softAt = (gen: number) => {
    const seen = workers.flatMap((w) => w.generations.filter((g) => g.gen === gen));
    if (seen.length > 0) return Math.min(...seen.map((g) => g.softAtMs));
    const r = byN.get(gen);
    return r === undefined ? Number.POSITIVE_INFINITY : answered(r) + plan.ttlMs;
  };

  const waitedFor = new Map<number, number>();
  const waitedBySource: Record<string, number> = {};
  for (const w of workers) {
    for (const s of w.slowReads) {
      if (!s.waited) continue;
      bump(waitedBySource, s.source);
      // A read that waited for generation g waited for the refresh of the one g replaced;
      // a failed one is placed by when it started.
      const gen = s.gen > 0 ? (replaces.get(s.gen) ?? 0) : currentAt(s.atMs);
      waitedFor.set(gen, (waitedFor.get(gen) ?? 0) + 1);
    }
  }
  const refreshes = new Map<number, { early: number; stale: number }>();
  for (const w of workers) {
    for (let i = 1; i < w.refreshSamples.length; i++) {
      const [atMs, early, stale] = w.refreshSamples[i] as [number, number, number];
      const [, early0, stale0] = w.refreshSamples[i - 1] as [number, number, number];
      const gen = currentAt(atMs);
      const r = refreshes.get(gen) ?? { early: 0, stale: 0 };
      r.early += early - early0;
      r.stale += stale - stale0;
      refreshes.set(gen, r);
    }
  }

  /** The row of one expiry, number `expiry`: the end of generation `gen`'s freshness, and what it cost. */
  const expiryRow = (gen: number, expiry: number) => {
    const soft = softAt(gen);
    const refreshedBy = reads.filter((x) => replaces.get(x.n) === gen);
    if (soft >= stopAtMs && refreshedBy.length === 0) return undefined;
    const first = refreshedBy[0];
    const seen = workers.flatMap((w) => w.generations.filter((g) => g.gen === gen));
    const lastStale = Math.max(...seen.map((g) => g.lastStaleAtMs ?? Number.NEGATIVE_INFINITY));
    const superseded = reads.some((x) => x.n > gen && answered(x) <= soft);
    const sourceReads = refreshedBy.length;
    const waited = waitedFor.get(gen) ?? 0;
    const why: string[] = [];
    if (sourceReads > 1) why.push(`${sourceReads} source reads`);
    if (sourceReads === 0 && superseded) why.push('superseded');
    else if (sourceReads === 0 && stopAtMs - soft > 2 * plan.latencyMs) why.push('never refreshed');
    if (waited > 0 && plan.staleMs > 0) why.push(`${waited} waited`);
    return {
      /** 1-based, in order of generations. */
      expiry,
      /** The generation that expired (origin read number). */
      gen,
      /** Its soft expiry, ms after the warm-up fill. */
      softAtMs: soft - t0Ms,
      /** Source reads that replaced this generation (goal 1), counted by the origin. */
      sourceReads,
      /** Arrival of the first of them at the origin, ms relative to the soft expiry (negative: early). */
      refreshReadAtMs: first === undefined ? undefined : first.arrivedAtMs - soft,
      /** When its answer left the origin, ms relative to the soft expiry. */
      newValueAtMs: first === undefined ? undefined : answered(first) - soft,
      /** Reads that waited on the loader for the value replacing this one (goal 0 with stale on). */
      waited,
      /** Reads answered with this generation after its soft expiry. */
      staleServed: seen.reduce((n, g) => n + g.stale, 0),
      /** Last stale read of it, ms after its soft expiry. */
      staleForMs: Number.isFinite(lastStale) ? lastStale - soft : undefined,
      /** Background refreshes started while this generation was the newest, all instances. */
      earlyRefreshes: refreshes.get(gen)?.early ?? 0,
      staleRefreshes: refreshes.get(gen)?.stale ?? 0,
      /** `ok`, or why not. */
      verdict: why.length === 0 ? 'ok' : why.join(', '),
      pass: why.every((w) => w === 'superseded'),
    };
  };
  const rows: Array<NonNullable<ReturnType<typeof expiryRow>>> = [];
  for (const r of reads) {
    const row = expiryRow(r.n, rows.length + 1);
    if (row !== undefined) rows.push(row);
  }

  const sum = (f: (w: WorkerResult) => number) => workers.reduce((n, w) => n + f(w), 0);
  const errorCodes: Record<string, number> = {};
  const metrics: Record<string, Record<string, number>> = {};
  for (const w of workers) {
    addCounts(errorCodes, w.errorCodes);
    for (const [name, values] of Object.entries(w.metrics)) {
      metrics[name] = addCounts(metrics[name] ?? {}, values);
    }
  }
  const expiriesObserved = rows.filter(
    (r) => r.softAtMs + t0Ms < stopAtMs && r.verdict !== 'superseded',
  ).length;
  const waited = sum((w) => w.waited);
  const failures = sum((w) => w.failures);
  const failed: string[] = [];
  for (const r of rows) if (!r.pass) failed.push(`expiry ${r.expiry}: ${r.verdict}`);
  if (failures > 0) failed.push(`${failures} reads failed`);
  if (expiriesObserved < plan.expiries)
    failed.push(`only ${expiriesObserved} of ${plan.expiries} expiries happened during the run`);
  const readsTotal = sum((w) => w.reads);
  return {
    drill: 'expiry' as const,
    plan,
    /** Expiries that fell inside the run. */
    expiriesObserved,
    rows,
    /** All source reads, the warm-up included, counted by the origin. */
    sourceReads: reads.length,
    reads: readsTotal,
    readsPerSecond: Math.round(readsTotal / (runMs / 1000)),
    waited,
    /** Waited reads by the layer that answered them. */
    waitedBySource,
    failures,
    errorCodes,
    worstP99Ms: Math.max(...workers.map((w) => w.p99Ms)),
    maxMs: Math.max(...workers.map((w) => w.maxMs)),
    /** The instances' own counters, summed. */
    metrics,
    /** Per instance: its reads and its own counters. */
    instances: workers.map(({ generations, slowReads, refreshSamples, ...rest }) => rest),
    /** Every read that waited or failed (up to 2,000 per instance), by instance pid, ms after the warm-up fill. */
    slowReads: workers
      .flatMap((w) => w.slowReads.map((s) => ({ ...s, pid: w.pid, atMs: s.atMs - t0Ms })))
      .sort((a, b) => a.atMs - b.atMs),
    failed,
    pass: failed.length === 0,
  };
}

/** The drill's report (also its `--json`). */
export type ExpiryReport = ReturnType<typeof judgeExpiry>;

const ms = (x: number | undefined) => (x === undefined ? '-' : Math.round(x));
const labelled = (m: Record<string, number> | undefined) =>
  Object.entries(m ?? {})
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k || 'all'} ${n}`)
    .join(', ') || '0';

/** The report as a compact table with PASS/FAIL. */
export function renderExpiry(r: ExpiryReport): string {
  const p = r.plan;
  const rows = r.rows.map((x) => [
    x.expiry,
    `#${x.gen}`,
    ms(x.softAtMs),
    x.sourceReads,
    ms(x.refreshReadAtMs),
    ms(x.newValueAtMs),
    x.waited,
    x.staleServed,
    ms(x.staleForMs),
    x.earlyRefreshes,
    x.staleRefreshes,
    x.verdict,
  ]);
  const m = r.metrics;
  const early = r.rows.filter((x) => x.newValueAtMs !== undefined && x.newValueAtMs < 0).length;
  return [
    `expiry drill: ${p.instances} processes × ${p.clients} client loops on one hot key, ttlMs ${p.ttlMs}, staleMs ${p.staleMs}, jitter 0, earlyRefreshBeta ${p.beta}, source latency ${p.latencyMs} ms, pause ${p.pauseMs} ms`,
    columns(rows, [
      ...['expiry', 'value', 'soft at ms', 'source reads', 'refresh read at', 'new value at'],
      ...['waited', 'stale served', 'stale for ms', 'early refr.', 'stale refr.', 'result'],
    ]),
    '  (soft at: ms after the warm-up fill; refresh read / new value at: ms relative to that soft expiry, negative = before it)',
    `  soft expiries within the run ${r.expiriesObserved} (asked ${p.expiries}); ${early} of ${r.rows.length} values replaced before their soft expiry (XFetch); source reads ${r.sourceReads} incl. the warm-up (law: ≤ 1 per expiry)`,
    `  reads ${r.reads} (${r.readsPerSecond}/s); waited on the loader ${r.waited}${r.waited > 0 ? ` (${labelled(r.waitedBySource)})` : ''} (law: 0${p.staleMs === 0 ? '; not judged with staleMs 0' : ''}); failed ${r.failures}${r.failures > 0 ? ` (${labelled(r.errorCodes)})` : ''}`,
    `  latency worst p99 ${r.worstP99Ms} ms, max ${r.maxMs} ms`,
    `  store counters: refreshes ${labelled(m.echostore_refreshes_total)}; lease ${labelled(m.echostore_lease_total)}; coherence ${labelled(m.echostore_coherence_total)}; fills ${labelled(m.echostore_fills_total)}; refresh failures ${labelled(m.echostore_refresh_failures_total)}`,
    r.pass
      ? `PASS: at most one source read per expiry across the fleet${p.staleMs > 0 ? ', no reader waited on the loader' : ''}, no failed reads`
      : `FAIL: ${r.failed.join('; ')}`,
    '',
  ].join('\n');
}
