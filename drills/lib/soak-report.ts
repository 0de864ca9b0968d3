/** The soak drill's verdict and its printed report. */
import type autocannon from 'autocannon';
import { emitJson } from './args.js';
import { columns } from './columns.js';
import { KINDS, type Kind, type Tally } from './mix.js';
import { percentile, table } from './report.js';

/** The table stats the drill judges; the others are reported as they come. */
export interface AtRest {
  flights: number;
  mailbox_depth: number;
  [stat: string]: number;
}

const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;
const ms = (x: number) => Number(x.toFixed(2));
const count = (m: Map<string | number, number>) =>
  [...m.entries()]
    .sort(([a], [b]) => String(a).localeCompare(String(b)))
    .map(([k, n]) => `${k}×${n}`)
    .join(', ');

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
  failures: Map<string, number>;
  tally: Tally;
  stats: AtRest;
  waitedMs: number;
  rssStart: number;
  rssEnd: number;
  rssSamples: number[];
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
  const bad5xx = [...tally.errorCodes.entries()].filter(
    ([k]) => k.startsWith('5') && !k.endsWith(' ECC_SHED'),
  );
  const growth = m.rssEnd / m.rssStart;
  const reasons: string[] = [];
  if (bad5xx.length > 0) reasons.push(`5xx other than ECC_SHED: ${count(new Map(bad5xx))}`);
  if (result.timeouts > 0) reasons.push(`${result.timeouts} requests timed out`);
  if (result.errors - result.timeouts > 0) {
    reasons.push(`${result.errors - result.timeouts} requests errored`);
  }
  if (lost > 0) reasons.push(`${lost} requests went unanswered`);
  if (stats.flights !== 0) reasons.push(`flights = ${stats.flights} at rest`);
  if (stats.mailbox_depth !== 0) reasons.push(`mailbox_depth = ${stats.mailbox_depth} at rest`);
  if (growth > m.maxRssGrowth)
    reasons.push(`RSS grew ${growth.toFixed(2)}× (> ${m.maxRssGrowth}×)`);
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
    p50Ms: ms(percentile(all, 50)),
    p99Ms: ms(percentile(all, 99)),
    kinds: Object.fromEntries(
      KINDS.map((k) => {
        const t = tally.byKind[k];
        return [
          k,
          {
            responses: t.responses,
            statuses: Object.fromEntries(t.statuses),
            p50Ms: ms(percentile(t.latenciesMs, 50)),
            p99Ms: ms(percentile(t.latenciesMs, 99)),
            l1Hits: t.l1Hits,
          },
        ];
      }),
    ),
    hotL1HitRatio: ms(hot.l1Hits / Math.max(1, hot.statuses.get(200) ?? 0)),
    errorCodes: Object.fromEntries(tally.errorCodes),
    timeouts: result.timeouts,
    errors: result.errors,
    requestFailures: Object.fromEntries(m.failures),
    unanswered: lost,
    sourceReads: m.sourceReads,
    loaderMeanMs: ms(m.loaderMeanMs),
    atRest: { ...stats, settledMs: m.waitedMs },
    rss: {
      startBytes: m.rssStart,
      peakBytes: Math.max(...m.rssSamples),
      endBytes: m.rssEnd,
      growth: ms(growth),
      maxGrowth: m.maxRssGrowth,
      samplesBytes: m.rssSamples,
    },
    failed: reasons,
    pass: reasons.length === 0,
  };
}

/** A soak report. */
export type SoakReport = ReturnType<typeof soakReport>;

/**
 * Prints `report` as a table to stdout; `json` as for the drills' `--json`:
 * `-` prints JSON instead, a path writes the JSON there as well.
 */
export function printSoak(report: SoakReport, tally: Tally, json: string | undefined): void {
  if (emitJson(json, report)) return;
  const kinds = columns(
    ['request', 'share', 'responses', 'statuses', 'p50 ms', 'p99 ms'],
    KINDS.map((k) => {
      const t = tally.byKind[k];
      const r = report.kinds[k] as { p50Ms: number; p99Ms: number };
      return [k, `${report.weights[k] * 100}%`, t.responses, count(t.statuses), r.p50Ms, r.p99Ms];
    }),
  );
  const { rss, atRest } = report;
  process.stdout.write(
    `soak drill: ${report.seconds} s, ${report.connections} connections, ${report.hotIds} hot ids, source latency ${report.sourceLatencyMs} ms, maxConcurrentLoads ${report.maxConcurrentLoads}\n${kinds}\n${table(
      [
        ['throughput', `${report.reqPerSec.toLocaleString('en-US')} req/s`],
        ['latency p50 / p99', `${report.p50Ms} / ${report.p99Ms} ms`],
        ['hot GETs answered by L1', `${(report.hotL1HitRatio * 100).toFixed(1)}%`],
        [
          'source reads (loader mean, seen by the service)',
          `${report.sourceReads} (${report.loaderMeanMs} ms)`,
        ],
        ['error codes (non-2xx)', count(tally.errorCodes) || 'none'],
        [
          'timeouts / errors / unanswered',
          `${report.timeouts} / ${report.errors - report.timeouts} / ${report.unanswered}   (law: 0 / 0 / 0)${
            Object.keys(report.requestFailures).length > 0
              ? `  ${JSON.stringify(report.requestFailures)}`
              : ''
          }`,
        ],
        [
          'at rest: flights / mailbox_depth',
          `${atRest.flights} / ${atRest.mailbox_depth}   (law: 0 / 0; after ${atRest.settledMs} ms)`,
        ],
        [
          'RSS start / peak / end',
          `${mb(rss.startBytes)} / ${mb(rss.peakBytes)} / ${mb(rss.endBytes)}   (×${rss.growth}; bound ×${rss.maxGrowth})`,
        ],
      ],
    )}\n${report.pass ? 'PASS' : `FAIL: ${report.failed.join('; ')}`}\n`,
  );
}
