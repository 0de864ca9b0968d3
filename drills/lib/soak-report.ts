/** The soak drill's verdict and its printed report. */
import type autocannon from 'autocannon';
import { KINDS, type Kind, type KindTally, type Tally } from './mix.js';
import { columns, listCounts, median, p50p99, round } from './report.js';

/** The table stats the drill judges; the others are reported as they come. */
export interface AtRest {
  flights: number;
  mailbox_depth: number;
  [stat: string]: number;
}

/** The service's memory at one moment of the run, bytes; `atS` seconds into the load. */
export interface MemorySample {
  atS: number;
  rss: number;
  /** `nodejs_heap_after_gc_bytes`: heap in use after the latest full GC. */
  heapAfterGc: number;
  /** What the table's L1 counts against `l1.maxBytes`. */
  l1Bytes: number;
}

/** RSS and heap after GC at the end may be this far off their value when L1 became full. */
export const FLAT_TOLERANCE = 0.1;

/** What a soak run measured, and the bounds it ran under. */
export interface Measured {
  /** Shares of the request kinds. */
  weights: Readonly<Record<Kind, number>>;
  maxConcurrentLoads: number;
  /** RSS at the end may be at most this multiple of RSS at the start. */
  maxRssGrowth: number;
  seconds: number;
  connections: number;
  hotIds: number;
  latencyMs: number;
  result: autocannon.Result;
  failures: Record<string, number>;
  tally: Tally;
  stats: AtRest;
  waitedMs: number;
  /** RSS, bytes: after warm-up (idle), after the settle, and every few seconds of the run (both included). */
  rssStart: number;
  rssEnd: number;
  rssSamples: number[];
  /** RSS, heap after GC and L1 bytes every few seconds (the first after warm-up, the last after the settle). */
  memorySamples: MemorySample[];
  /** The table's `l1.maxBytes`. */
  l1MaxBytes: number;
  sourceReads: number;
  /** Mean loader time as the service measured it (`echostore_load_duration_seconds`). */
  loaderMeanMs: number;
}

/** The report: figures, and in `failed` the reasons the run fails (empty: it passes). */
export function soakReport(m: Measured) {
  const { result, tally, stats } = m;
  // With pipelining 1 each connection has exactly one request in flight when autocannon stops.
  const unanswered = result.requests.sent - tally.responses - m.connections;
  const lost = Math.max(0, unanswered - result.errors);
  const bad5xx = Object.entries(tally.errorCodes).filter(
    ([k]) => k.startsWith('5') && !k.endsWith(' ECC_SHED'),
  );
  const { rssStart, rssEnd } = m;
  const growth = rssEnd / rssStart;
  const failed: string[] = [];
  if (bad5xx.length > 0) {
    failed.push(`5xx other than ECC_SHED: ${listCounts(Object.fromEntries(bad5xx))}`);
  }
  if (result.timeouts > 0) failed.push(`${result.timeouts} requests timed out`);
  if (result.errors - result.timeouts > 0) {
    failed.push(`${result.errors - result.timeouts} requests errored`);
  }
  if (lost > 0) failed.push(`${lost} requests went unanswered`);
  if (stats.flights !== 0) failed.push(`flights = ${stats.flights} at rest`);
  if (stats.mailbox_depth !== 0) failed.push(`mailbox_depth = ${stats.mailbox_depth} at rest`);
  if (growth > m.maxRssGrowth) failed.push(`RSS grew ${growth.toFixed(2)}× (> ${m.maxRssGrowth}×)`);
  const flat = flatness(m);
  if (flat.judged && !flat.pass) {
    failed.push(
      `memory not flat with L1 full: RSS ${signed(flat.rssChange)}, heap after GC ${signed(flat.heapChange)} (bound ±${FLAT_TOLERANCE * 100} %)`,
    );
  }
  const all = KINDS.flatMap((k) => tally.byKind[k].latenciesMs);
  const hot = tally.byKind['hot GET'];
  return {
    drill: 'soak',
    seconds: m.seconds,
    connections: m.connections,
    hotIds: m.hotIds,
    sourceLatencyMs: m.latencyMs,
    maxConcurrentLoads: m.maxConcurrentLoads,
    weights: m.weights,
    durationS: result.duration,
    responses: tally.responses,
    reqPerSec: Math.round(tally.responses / result.duration),
    ...p50p99(all),
    kinds: Object.fromEntries(
      KINDS.map((kind) => {
        const { latenciesMs, ...t } = tally.byKind[kind];
        return [kind, { ...t, ...p50p99(latenciesMs) }];
      }),
    ) as Record<Kind, Omit<KindTally, 'latenciesMs'> & { p50Ms: number; p99Ms: number }>,
    hotL1HitRatio: round(hot.l1Hits / Math.max(1, hot.statuses['200'] ?? 0)),
    errorCodes: tally.errorCodes,
    timeouts: result.timeouts,
    errors: result.errors,
    requestFailures: m.failures,
    unanswered: lost,
    sourceReads: m.sourceReads,
    loaderMeanMs: round(m.loaderMeanMs),
    atRest: { ...stats, settledMs: m.waitedMs },
    rss: {
      startBytes: rssStart,
      peakBytes: Math.max(...m.rssSamples),
      endBytes: rssEnd,
      growth: round(growth),
      maxGrowth: m.maxRssGrowth,
      samplesBytes: m.rssSamples,
    },
    memory: { l1MaxBytes: m.l1MaxBytes, ...flat, samples: m.memorySamples },
    failed,
    pass: failed.length === 0,
  };
}

const signed = (x: number) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(1)} %`;

/** V8 sizes its generations to the load for about this long after L1 fills; flatness is judged after it. */
export const SETTLE_S = 60;

/**
 * Is memory flat once L1 is full? From {@link SETTLE_S} after L1 first held
 * 95 % of its bytes to the end, the median RSS and heap after GC of the last
 * minute of samples each within ±10 % of the first minute's (medians, so one
 * sample taken mid-GC does not decide). Judged only when that span is at
 * least half the run (a short run may never fill L1).
 */
export function flatness(m: Pick<Measured, 'memorySamples' | 'l1MaxBytes' | 'seconds'>) {
  const samples = m.memorySamples;
  const full = samples.find((s) => s.l1Bytes >= 0.95 * m.l1MaxBytes);
  const to = samples[samples.length - 1];
  const fromS = full === undefined ? undefined : full.atS + SETTLE_S;
  const spanS = fromS === undefined || to === undefined ? 0 : to.atS - fromS;
  const judged = fromS !== undefined && to !== undefined && spanS >= m.seconds / 2;
  const first = judged ? samples.filter((s) => s.atS >= fromS && s.atS < fromS + 60) : [];
  const last = judged ? samples.filter((s) => s.atS > to.atS - 60) : [];
  const at = (xs: MemorySample[]) =>
    xs.length === 0
      ? undefined
      : { rss: median(xs.map((s) => s.rss)), heapAfterGc: median(xs.map((s) => s.heapAfterGc)) };
  const start = at(first);
  const end = at(last);
  const rssChange = start && end ? end.rss / start.rss - 1 : 0;
  const heapChange = start && end ? end.heapAfterGc / start.heapAfterGc - 1 : 0;
  return {
    fullFromS: full?.atS,
    judgedFromS: fromS,
    judgedForS: spanS,
    judged: judged && start !== undefined && end !== undefined,
    rssChange: round(rssChange, 3),
    heapChange: round(heapChange, 3),
    fullStart: start,
    end,
    pass: Math.abs(rssChange) <= FLAT_TOLERANCE && Math.abs(heapChange) <= FLAT_TOLERANCE,
  };
}

/** A soak report. */
export type SoakReport = ReturnType<typeof soakReport>;

const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;

/** The report as tables, with PASS or FAIL and the reasons. */
export function renderSoak(r: SoakReport): string {
  const kinds = columns(
    KINDS.map((kind) => {
      const k = r.kinds[kind];
      return [
        kind,
        `${r.weights[kind] * 100}%`,
        k.responses,
        listCounts(k.statuses, ''),
        k.p50Ms,
        k.p99Ms,
      ];
    }),
    ['request', 'share', 'responses', 'statuses', 'p50 ms', 'p99 ms'],
  );
  const failures = Object.keys(r.requestFailures).length > 0;
  const { rss, atRest } = r;
  const figures = columns([
    ['throughput', `${r.reqPerSec.toLocaleString('en-US')} req/s`],
    ['latency p50 / p99', `${r.p50Ms} / ${r.p99Ms} ms`],
    ['hot GETs answered by L1', `${(r.hotL1HitRatio * 100).toFixed(1)}%`],
    ['source reads (loader mean, seen by the service)', `${r.sourceReads} (${r.loaderMeanMs} ms)`],
    ['error codes (non-2xx)', listCounts(r.errorCodes, 'none')],
    [
      'timeouts / errors / unanswered',
      `${r.timeouts} / ${r.errors - r.timeouts} / ${r.unanswered}   (law: 0 / 0 / 0)${failures ? `  ${JSON.stringify(r.requestFailures)}` : ''}`,
    ],
    [
      'at rest: flights / mailbox_depth',
      `${atRest.flights} / ${atRest.mailbox_depth}   (law: 0 / 0; after ${atRest.settledMs} ms)`,
    ],
    [
      'RSS start / peak / end',
      `${mb(rss.startBytes)} / ${mb(rss.peakBytes)} / ${mb(rss.endBytes)}   (×${rss.growth}; bound ×${rss.maxGrowth})`,
    ],
    [
      'heap after GC start / end',
      `${mb(r.memory.samples[0]?.heapAfterGc ?? 0)} / ${mb(r.memory.samples.at(-1)?.heapAfterGc ?? 0)}   (L1 bound ${mb(r.memory.l1MaxBytes)})`,
    ],
    [
      'with L1 full: RSS / heap after GC (medians), first minute → last',
      r.memory.fullFromS === undefined
        ? 'L1 never full'
        : r.memory.fullStart === undefined || r.memory.end === undefined || !r.memory.judged
          ? `L1 full at ${r.memory.fullFromS} s; not judged (judged from ${SETTLE_S} s later, for at least half the run)`
          : `${mb(r.memory.fullStart.rss)} / ${mb(r.memory.fullStart.heapAfterGc)} from ${r.memory.judgedFromS} s → ${mb(r.memory.end.rss)} / ${mb(r.memory.end.heapAfterGc)}   (${signed(r.memory.rssChange)} / ${signed(r.memory.heapChange)}; bound ±${FLAT_TOLERANCE * 100} %)`,
    ],
  ]);
  return `soak drill: ${r.seconds} s, ${r.connections} connections, ${r.hotIds} hot ids, source latency ${r.sourceLatencyMs} ms, maxConcurrentLoads ${r.maxConcurrentLoads}\n${kinds}\n${figures}\n${r.pass ? 'PASS' : `FAIL: ${r.failed.join('; ')}`}\n`;
}
