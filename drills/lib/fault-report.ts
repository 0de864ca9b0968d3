/** Rows and checks of the fault drill: what each phase did to the clients, and what was judged. */
import type { Timed } from './http.js';
import { bump, type Check, checkLines, columns, listCounts } from './report.js';

/** One request of the fault drill's load. */
export interface Sample extends Omit<Timed, 'body'> {
  /** The drill phase in effect when the request started. */
  phase: string;
  /** Label of the instance asked. */
  target: string;
  /** A hot id (warmed into that instance's L1 beforehand). */
  hot: boolean;
}

/** What the clients saw during one phase: its samples summarised. */
export function phaseRow(
  phase: string,
  samples: Sample[],
  durationMs: number,
  sourceReads: number,
  notes: string[],
) {
  const mine = samples.filter((s) => s.phase === phase);
  const failed5xx: Record<string, number> = {};
  const noAnswer: Record<string, number> = {};
  for (const s of mine) {
    if (s.status >= 500) bump(failed5xx, s.code ?? 'NO_CODE');
    else if (s.status === 0) bump(noAnswer, s.code ?? 'UNKNOWN');
  }
  const hot = mine.filter((s) => s.hot);
  const slowest = (xs: Sample[]) => Math.round(Math.max(0, ...xs.map((s) => s.ms)));
  return {
    phase,
    durationMs: Math.round(durationMs),
    requests: mine.length,
    /** Answered 2xx or 4xx (a 404 is an answer). */
    answered: mine.filter((s) => s.status >= 200 && s.status < 500).length,
    /** 5xx answers by `error.code`. */
    failed5xx,
    /** Requests with no HTTP answer, by client-side error (connection refused, client timeout). */
    noAnswer,
    hotRequests: hot.length,
    /** Hot-id (L1) requests not answered 200. */
    hotFailed: hot.filter((s) => s.status !== 200).length,
    /** Hot-id requests answered 200 but not from L1 (`Cache-Status` without `detail=l1`). */
    hotNotL1: hot.filter((s) => s.status === 200 && !s.l1).length,
    maxMs: slowest(mine),
    /** Slowest hot-id (L1) request, ms. */
    hotMaxMs: slowest(hot),
    /** Source reads the origin counted from the phase's start to the next phase's start. */
    sourceReads,
    notes,
  };
}

/** One phase's row. */
export type PhaseRow = ReturnType<typeof phaseRow>;

/** The drill's report (also its `--json`); `boundMs` is the longest a request may lawfully take. */
export interface FaultReport {
  drill: 'faults';
  loops: number;
  sourceLatencyMs: number;
  boundMs: number;
  phases: PhaseRow[];
  checks: Check[];
  runtimeMs: number;
  pass: boolean;
}

/** The phase table, the notes under it, and one PASS/FAIL line per check. */
export function renderFaults(r: FaultReport): string {
  const header = ['phase', 'secs', 'requests', 'answered', 'failed 5xx', 'no answer', 'L1 reqs'];
  const table = columns(
    r.phases.map((p) => [
      p.phase,
      (p.durationMs / 1000).toFixed(1),
      p.requests,
      p.answered,
      listCounts(p.failed5xx),
      listCounts(p.noAnswer),
      p.hotRequests,
      p.hotFailed,
      p.hotNotL1,
      p.maxMs,
      p.hotMaxMs,
      p.sourceReads,
    ]),
    [...header, 'L1 failed', 'L1 not hit', 'max ms', 'L1 max ms', 'source reads'],
  );
  return [
    `faults drill: 2 instances, ${r.loops} loops (half hot L1 ids, half cold), source latency ${r.sourceLatencyMs} ms, runtime ${(r.runtimeMs / 1000).toFixed(1)} s`,
    table,
    ...r.phases.flatMap((p) => p.notes.map((n) => `  ${p.phase.split(' ')[0]}: ${n}`)),
    ...checkLines(r.checks),
    '',
  ].join('\n');
}
