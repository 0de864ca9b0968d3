/** Rows and checks of the fault drill: what each phase did to the clients, and what was judged. */
import { columns } from './columns.js';
import type { Sample } from './load.js';

/** What the clients saw during one phase. */
export interface PhaseRow {
  phase: string;
  durationMs: number;
  requests: number;
  /** Answered 2xx or 4xx (a 404 is an answer). */
  answered: number;
  /** 5xx answers by `error.code`. */
  failed5xx: Record<string, number>;
  /** Requests with no HTTP answer, by client-side error (connection refused, client timeout). */
  noAnswer: Record<string, number>;
  hotRequests: number;
  /** Hot-id (L1) requests not answered 200. */
  hotFailed: number;
  /** Hot-id requests answered 200 but not from L1 (`Cache-Status` without `detail=l1`). */
  hotNotL1: number;
  maxMs: number;
  /** Slowest hot-id (L1) request, ms. */
  hotMaxMs: number;
  /** Source reads the origin counted from the phase's start to the next phase's start. */
  sourceReads: number;
  notes: string[];
}

/** One judged law. */
export interface Check {
  name: string;
  pass: boolean;
  detail: string;
}

/** Summarises the samples of `phase`. */
export function phaseRow(
  phase: string,
  samples: Sample[],
  durationMs: number,
  sourceReads: number,
  notes: string[],
): PhaseRow {
  const mine = samples.filter((s) => s.phase === phase);
  const failed5xx: Record<string, number> = {};
  const noAnswer: Record<string, number> = {};
  for (const s of mine) {
    if (s.status >= 500) bump(failed5xx, s.code ?? 'NO_CODE');
    else if (s.status === 0) bump(noAnswer, s.code ?? 'UNKNOWN');
  }
  const hot = mine.filter((s) => s.hot);
  return {
    phase,
    durationMs: Math.round(durationMs),
    requests: mine.length,
    answered: mine.filter((s) => s.status >= 200 && s.status < 500).length,
    failed5xx,
    noAnswer,
    hotRequests: hot.length,
    hotFailed: hot.filter((s) => s.status !== 200).length,
    hotNotL1: hot.filter((s) => s.status === 200 && !s.l1).length,
    maxMs: Math.round(Math.max(0, ...mine.map((s) => s.ms))),
    hotMaxMs: Math.round(Math.max(0, ...hot.map((s) => s.ms))),
    sourceReads,
    notes,
  };
}

function bump(counts: Record<string, number>, key: string): void {
  counts[key] = (counts[key] ?? 0) + 1;
}

function counts(c: Record<string, number>): string {
  const parts = Object.entries(c).map(([k, n]) => `${k}×${n}`);
  return parts.length === 0 ? '0' : parts.join(', ');
}

/** The phase table, the notes under it, and one PASS/FAIL line per check. */
export function renderFaults(header: string, rows: PhaseRow[], checks: Check[]): string {
  const table = columns(
    [
      'phase',
      'secs',
      'requests',
      'answered',
      'failed 5xx',
      'no answer',
      'L1 reqs',
      'L1 failed',
      'L1 not hit',
      'max ms',
      'L1 max ms',
      'source reads',
    ],
    rows.map((r) => [
      r.phase,
      (r.durationMs / 1000).toFixed(1),
      r.requests,
      r.answered,
      counts(r.failed5xx),
      counts(r.noAnswer),
      r.hotRequests,
      r.hotFailed,
      r.hotNotL1,
      r.maxMs,
      r.hotMaxMs,
      r.sourceReads,
    ]),
  );
  const notes = rows.flatMap((r) => r.notes.map((n) => `  ${r.phase.split(' ')[0]}: ${n}`));
  const lines = checks.map((c) => `${c.pass ? 'PASS' : 'FAIL'}: ${c.name} — ${c.detail}`);
  return [header, table, ...notes, ...lines, ''].join('\n');
}
