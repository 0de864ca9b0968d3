/** The failover drill's figures per phase and side, its checks, and its table. */
import type { Check } from './fault-report.js';
import type { Timed } from './http.js';
import { bump, columns, listCounts, p50p99 } from './report.js';

/** What a request of the failover drill's mix does. */
export type RequestKind = 'hot GET' | 'cold GET' | 'PUT';

/** Which side of the failover an id's keys live on. */
export type Side = 'lost' | 'other';

/** One request as the client saw it. */
export interface ShardSample extends Omit<Timed, 'body' | 'cacheStatus'> {
  phase: string;
  kind: RequestKind;
  side: Side;
  id: string;
  /** Instance asked (its index). */
  target: number;
  /** For a cold GET, judged after the run: a second read on the other instance cost the source nothing. */
  inL2?: boolean;
  /** When it started, ms since the load began. */
  atMs: number;
}

/** What the clients saw of one side during one phase. */
export function sideRow(samples: ShardSample[], phase: string, side: Side) {
  const mine = samples.filter((s) => s.phase === phase && s.side === side);
  const failed: Record<string, number> = {};
  for (const s of mine) if (s.status !== 200) bump(failed, `${s.kind} ${s.code ?? s.status}`);
  const cold = mine.filter((s) => s.kind === 'cold GET');
  return {
    phase,
    side,
    requests: mine.length,
    /** Requests not answered 200, by `<kind> <code>`. */
    failed,
    ...p50p99(
      mine.map((s) => s.ms),
      1,
    ),
    maxMs: Math.round(Math.max(0, ...mine.map((s) => s.ms))),
    hotL1: mine.filter((s) => s.kind === 'hot GET' && s.l1).length,
    hot: mine.filter((s) => s.kind === 'hot GET').length,
    /** Cold GETs whose answer was in L2 afterwards (counted at the source). */
    coldInL2: cold.filter((s) => s.inL2 === true).length,
    cold: cold.length,
  };
}

/** One side's row. */
export type SideRow = ReturnType<typeof sideRow>;

/** The drill's report (also its `--json`). */
export interface FailoverReport {
  drill: 'failover';
  mode: 'cluster' | 'sentinel';
  topology: string;
  loops: number;
  sourceLatencyMs: number;
  boundMs: number;
  /** From the SIGKILL until the harness saw a replica serve the victim's share. */
  promotionMs: number;
  /** From the SIGKILL until the first cold GET of the lost shard whose fill reached L2 again. */
  firstFillAfterKillMs: number | undefined;
  /** L1 flushes per instance (a subscriber that lost its node flushes once). */
  l1Flushes: number[];
  rows: SideRow[];
  checks: Check[];
  runtimeMs: number;
  pass: boolean;
}

/** The phase × side table, the timeline, and one PASS/FAIL line per check. */
export function renderFailover(r: FailoverReport): string {
  const table = columns(
    r.rows.map((x) => [
      x.phase,
      x.side,
      x.requests,
      listCounts(x.failed),
      x.p50Ms,
      x.p99Ms,
      x.maxMs,
      `${x.hotL1}/${x.hot}`,
      `${x.coldInL2}/${x.cold}`,
    ]),
    ['phase', 'shard', 'requests', 'not 200', 'p50 ms', 'p99 ms', 'max ms', 'hot L1', 'cold in L2'],
  );
  const fill =
    r.firstFillAfterKillMs === undefined ? 'never' : `${r.firstFillAfterKillMs} ms after the kill`;
  return [
    `failover drill (${r.mode}): ${r.topology}; 2 instances, ${r.loops} loops, source latency ${r.sourceLatencyMs} ms, runtime ${(r.runtimeMs / 1000).toFixed(1)} s`,
    table,
    `  replica promoted ${r.promotionMs} ms after the kill; lost shard filled L2 again ${fill}; L1 flushes per instance: ${r.l1Flushes.join(' / ')}`,
    '  cold in L2: cold GETs whose id, read again on the other instance after the run, cost the source nothing',
    ...r.checks.map((c) => `${c.pass ? 'PASS' : 'FAIL'}: ${c.name} — ${c.detail}`),
    '',
  ].join('\n');
}
