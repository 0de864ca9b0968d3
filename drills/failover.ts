/**
 * Failover drill: two services under mixed load while a cluster primary (or the Sentinel
 * primary) is SIGKILLed → the other shards never fail, GETs keep answering, fills resume after the
 * promotion (counted at the source). Usage and laws: drills/README.md#failover.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { metric, scrape } from '../harness/metrics.js';
import type { Origin } from '../harness/origin.js';
import { drillArgs, flag, int, oneOf, runDrill } from './lib/cli.js';
import {
  clusterTopology,
  type FailoverTopology,
  type Side,
  sentinelTopology,
} from './lib/failover-topology.js';
import { FAULT_BOUND_MS as BOUND_MS, type FaultPair, startFaultPair } from './lib/fault-policy.js';
import { answer, itemUrl, type Timed, timed } from './lib/http.js';
import { inLanes, Loops, pick } from './lib/load.js';
import { Reaper } from './lib/reaper.js';
import { bump, type Check, checkLines, columns, listCounts, p50p99 } from './lib/report.js';

const args = drillArgs({
  mode: oneOf('cluster', 'sentinel'),
  secure: flag(),
  'baseline-s': int(5, 1, 600),
  'after-s': int(8, 4, 600),
  loops: int(16, 1, 200),
  'pause-ms': int(10, 0, 1_000),
  'latency-ms': int(20, 0, 1_000),
});

const TABLE = 'failover';
const REQUEST_TIMEOUT_MS = 15_000;
/** How long after the promotion the instances may take to send the shard's commands to the new primary. */
const LEARN_MS = 3_000;
const PROMOTION_WITHIN_MS = 30_000;

/** What a request of the failover drill's mix does. */
type RequestKind = 'hot GET' | 'cold GET' | 'PUT';

/** One request as the client saw it. */
interface ShardSample extends Omit<Timed, 'body' | 'cacheStatus'> {
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

async function main() {
  process.env.LOG_LEVEL ??= 'error'; // the degraded-shard warnings are what this drill provokes
  const began = performance.now();
  const reaper = new Reaper();
  const run = randomBytes(3).toString('hex');
  let topology: FailoverTopology | undefined;
  let pair: FaultPair | undefined;
  let load: Loops<ShardSample> | undefined;
  let promotionMs = Number.NaN;
  let killedAt = Number.NaN;
  let promotedAt = Number.NaN;
  let l1Flushes: number[] = [];
  try {
    topology = await (args.mode === 'cluster' ? clusterTopology : sentinelTopology)(
      reaper,
      args.secure,
    );
    pair = await startFaultPair(reaper, topology.section, TABLE, args['latency-ms']);
    const { origin, services, targets } = pair;
    const t = topology;
    const ids = (kind: string, n: number) =>
      Array.from({ length: n }, (_, i) => `${kind}-${run}-${i}`);
    const [hotIds, writeIds] = [ids('hot', 30), ids('w', 30)];
    const get = (base: string, id: string) => timed(itemUrl(base, TABLE, id), REQUEST_TIMEOUT_MS);
    for (const base of targets) for (const id of hotIds) await get(base, id);
    // Half hot GETs (L1), 40 % cold GETs (fresh ids, misses), 10 % PUTs, each to a random instance.
    let [cold, writes] = [0, 0];
    const gen: Loops<ShardSample> = new Loops({
      loops: args.loops,
      pauseMs: args['pause-ms'],
      async step(phase) {
        const r = Math.random();
        const kind: RequestKind = r < 0.5 ? 'hot GET' : r < 0.9 ? 'cold GET' : 'PUT';
        const id =
          kind === 'hot GET'
            ? (pick(hotIds) as string)
            : kind === 'cold GET'
              ? `cold-${run}-${++cold}`
              : (pick(writeIds) as string);
        const target = Math.floor(Math.random() * targets.length);
        const atMs = gen.now();
        const put = kind === 'PUT' ? { id, write: ++writes } : undefined;
        const url = itemUrl(targets[target] as string, TABLE, id);
        const answered = await answer(url, REQUEST_TIMEOUT_MS, put);
        return { phase, kind, side: t.sideOf(TABLE, id), id, target, atMs, ...answered };
      },
    });
    load = gen;
    gen.phase = '1 baseline';
    gen.start();
    await sleep(args['baseline-s'] * 1_000);
    gen.phase = '2 failover';
    killedAt = gen.now();
    await t.kill();
    await t.waitPromoted(PROMOTION_WITHIN_MS);
    promotedAt = gen.now();
    promotionMs = Math.round(promotedAt - killedAt);
    await sleep(LEARN_MS);
    gen.phase = '3 after';
    await sleep(args['after-s'] * 1_000);
    await gen.stop();
    await judgeFills(gen.samples, targets, origin);
    l1Flushes = await Promise.all(
      services.map(
        async (s) =>
          metric(await scrape(s.url), 'echostore_l1_flushes_total', { table: TABLE }) ?? 0,
      ),
    );
  } finally {
    await load?.stop();
    await pair?.stop();
    await topology?.stop();
    reaper.killAll();
  }
  const samples = load?.samples ?? [];
  const mode = (topology as FailoverTopology).mode;
  const phases = ['1 baseline', '2 failover', '3 after'];
  const sides = mode === 'cluster' ? (['other', 'lost'] as const) : (['lost'] as const);
  const rows = phases.flatMap((p) => sides.map((side) => sideRow(samples, p, side)));
  const firstFill = samples.find(
    (s) => s.side === 'lost' && s.kind === 'cold GET' && s.inL2 === true && s.atMs > killedAt,
  );
  const checks = judge(mode, samples, rows);
  return {
    drill: 'failover' as const,
    mode,
    topology: (topology as FailoverTopology).label,
    loops: args.loops,
    sourceLatencyMs: args['latency-ms'],
    boundMs: BOUND_MS,
    promotionMs,
    firstFillAfterKillMs:
      firstFill === undefined ? undefined : Math.round(firstFill.atMs - killedAt),
    l1Flushes,
    rows,
    checks,
    runtimeMs: Math.round(performance.now() - began),
    pass: checks.every((c) => c.pass),
  };
}

type Report = Awaited<ReturnType<typeof main>>;

/** What the clients saw of one side during one phase. */
function sideRow(samples: ShardSample[], phase: string, side: Side) {
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

type SideRow = ReturnType<typeof sideRow>;

/**
 * Whether each cold GET's fill reached L2, counted at the source: its id is read
 * again on the other instance (8 at a time); the source seeing no second read
 * means the value came from L2.
 */
async function judgeFills(samples: ShardSample[], targets: string[], origin: Origin) {
  const cold = samples.filter((s) => s.kind === 'cold GET' && s.status === 200);
  await inLanes(8, cold, async (s) => {
    await timed(itemUrl(targets[1 - s.target] as string, TABLE, s.id), REQUEST_TIMEOUT_MS);
    s.inL2 = origin.readsOf(s.id) === 1;
  });
}

/** The laws, judged on what the clients and the source saw. */
function judge(mode: 'cluster' | 'sentinel', samples: ShardSample[], rows: SideRow[]): Check[] {
  const row = (phase: string, side: string) =>
    rows.find((r) => r.phase === phase && r.side === side) as SideRow;
  const cold = (phase: string, side: string) =>
    samples.filter((s) => s.phase === phase && s.side === side && s.kind === 'cold GET');
  const inL2 = (xs: ShardSample[]) => xs.filter((s) => s.inL2 === true).length;
  const checks: Check[] = [];
  if (mode === 'cluster') {
    const other = samples.filter((s) => s.side === 'other');
    const failed = other.filter((s) => s.status !== 200);
    checks.push({
      name: 'other shards: no request fails, in any phase',
      pass: failed.length === 0,
      detail: `${failed.length} of ${other.length} not answered 200`,
    });
    const [before, during] = [row('1 baseline', 'other').p99Ms, row('2 failover', 'other').p99Ms];
    checks.push({
      name: 'other shards: p99 during the failover within 2× of the baseline',
      pass: during <= 2 * before,
      detail: `${during} ms against ${before} ms (limit ${Math.round(2 * before * 10) / 10} ms)`,
    });
    const filled = cold('2 failover', 'other');
    checks.push({
      name: 'other shards keep filling L2 during the failover: degraded for the lost shard only (counted at the source)',
      pass: filled.length > 0 && inL2(filled) === filled.length,
      detail: `${inL2(filled)} of ${filled.length} cold GETs in L2`,
    });
  }
  const lostGets = samples.filter((s) => s.side === 'lost' && s.kind !== 'PUT');
  const lostFailed = lostGets.filter((s) => s.status !== 200);
  checks.push({
    name: 'lost shard: every GET answered 200 (from L1 or the source), in every phase',
    pass: lostFailed.length === 0,
    detail: `${lostFailed.length} of ${lostGets.length} not answered 200`,
  });
  const puts = samples.filter((s) => s.kind === 'PUT' && s.status !== 200);
  const badPuts = puts.filter((s) => s.code !== 'ECC_VALKEY_UNAVAILABLE');
  checks.push({
    name: 'a PUT fails only with ECC_VALKEY_UNAVAILABLE (its shard has no primary)',
    pass: badPuts.length === 0,
    detail: `${puts.length} PUTs refused, ${badPuts.length} of them otherwise (${badPuts.map((s) => s.code).join(', ') || 'none'})`,
  });
  const late = samples.filter((s) => s.ms > BOUND_MS || s.status === 0);
  checks.push({
    name: `no request waits past ${BOUND_MS} ms (waitTimeoutMs + loadTimeoutMs + commandTimeoutMs + 1000)`,
    pass: late.length === 0,
    detail: `${late.length} late or unanswered; slowest ${Math.round(Math.max(0, ...samples.map((s) => s.ms)))} ms`,
  });
  const judged = cold('3 after', 'lost');
  const outage = cold('2 failover', 'lost');
  checks.push({
    name: `fills resume on the lost shard: cold GETs from ${LEARN_MS} ms after the promotion on reach L2 (counted at the source)`,
    pass: judged.length > 0 && inL2(judged) === judged.length,
    detail: `${inL2(judged)} of ${judged.length} in L2 (during the failover: ${inL2(outage)} of ${outage.length}, the rest answered from the source)`,
  });
  return checks;
}

/** The phase × side table, the timeline, and one PASS/FAIL line per check. */
function render(r: Report): string {
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
    ...checkLines(r.checks),
    '',
  ].join('\n');
}

runDrill('failover', args.json, main, render);
