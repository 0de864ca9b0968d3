/**
 * Failover drill: two services under mixed load while a cluster primary (or the Sentinel
 * primary) is SIGKILLed → the other shards never fail, GETs keep answering, fills resume after the
 * promotion (counted at the source). Usage and laws: drills/README.md#failover.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { type MetricSample, metric, scrape } from '../harness/metrics.js';
import type { Origin } from '../harness/origin.js';
import { drillArgs, flag, int, oneOf, runDrill } from './lib/cli.js';
import { type FailoverTopology, type Side, startTopology } from './lib/failover-topology.js';
import {
  all200,
  boundCheck,
  type FaultPair,
  p99Check,
  request,
  startFaultPair,
} from './lib/fault-policy.js';
import type { Timed } from './lib/http.js';
import { inLanes, Loops, pick, summarize } from './lib/load.js';
import { check, columns, listCounts } from './lib/report.js';

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
/** How long after the promotion the instances may take to send the shard's commands to the new primary. */
const LEARN_MS = 3_000;
const PROMOTION_WITHIN_MS = 30_000;

/** What a request of the failover drill's mix does. */
type RequestKind = 'hot GET' | 'cold GET' | 'PUT';

/** One request as the client saw it. */
interface ShardSample extends Timed {
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

runDrill('failover', args.json, async () => {
  process.env.LOG_LEVEL ??= 'error'; // the degraded-shard warnings are what this drill provokes
  const began = performance.now();
  const run = randomBytes(3).toString('hex');
  let topology: FailoverTopology | undefined;
  let pair: FaultPair | undefined;
  let load: Loops<ShardSample> | undefined;
  let [killedAt, promotionMs, l1Flushes] = [Number.NaN, Number.NaN, [] as number[]];
  try {
    topology = await startTopology(args.mode, args.secure);
    pair = await startFaultPair(topology.section, TABLE, args['latency-ms']);
    const { origin, services, targets } = pair;
    const t = topology;
    const ids = (kind: string) => Array.from({ length: 30 }, (_, i) => `${kind}-${run}-${i}`);
    const [hotIds, writeIds] = [ids('hot'), ids('w')];
    for (const base of targets) for (const id of hotIds) await request(base, TABLE, id);
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
        const answered = await request(targets[target] as string, TABLE, id, put);
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
    promotionMs = Math.round(gen.now() - killedAt);
    await sleep(LEARN_MS);
    gen.phase = '3 after';
    await sleep(args['after-s'] * 1_000);
    await gen.stop();
    await judgeFills(gen.samples, targets, origin);
    const flushes = (m: MetricSample[]) =>
      metric(m, 'echostore_l1_flushes_total', { table: TABLE });
    l1Flushes = await Promise.all(services.map(async (s) => flushes(await scrape(s.url)) ?? 0));
  } finally {
    await load?.stop();
    await pair?.stop();
    await topology?.stop();
  }
  const samples = load?.samples ?? [];
  const sides = args.mode === 'cluster' ? (['other', 'lost'] as const) : (['lost'] as const);
  const of = (phase: string, side: string, kind?: string) =>
    samples.filter((s) => s.phase === phase && s.side === side && (!kind || s.kind === kind));
  const inL2 = (xs: ShardSample[]) => xs.filter((s) => s.inL2 === true).length;
  const rows = ['1 baseline', '2 failover', '3 after'].flatMap((phase) =>
    sides.map((side) => {
      const mine = of(phase, side);
      const r = summarize(mine, (s) => `${s.kind} ${s.code ?? s.status}`);
      const [hot, cold] = [of(phase, side, 'hot GET'), of(phase, side, 'cold GET')];
      const l1 = hot.filter((s) => s.l1).length;
      const cells = [r.requests, listCounts(r.failed), r.p50Ms, r.p99Ms, r.maxMs];
      return [phase, side, ...cells, `${l1}/${hot.length}`, `${inL2(cold)}/${cold.length}`];
    }),
  );
  const firstFill = samples.find(
    (s) => s.side === 'lost' && s.kind === 'cold GET' && s.inL2 === true && s.atMs > killedAt,
  );
  const fill = firstFill ? `${Math.round(firstFill.atMs - killedAt)} ms after the kill` : 'never';
  const p99 = (phase: string) => summarize(of(phase, 'other')).p99Ms;
  const other = samples.filter((s) => s.side === 'other');
  const otherFilled = of('2 failover', 'other', 'cold GET');
  const lostGets = samples.filter((s) => s.side === 'lost' && s.kind !== 'PUT');
  const refused = samples.filter((s) => s.kind === 'PUT' && s.status !== 200);
  const badPuts = refused.filter((s) => s.code !== 'ECC_VALKEY_UNAVAILABLE');
  const [after, outage] = [of('3 after', 'lost', 'cold GET'), of('2 failover', 'lost', 'cold GET')];
  return {
    title: `failover drill (${args.mode}): ${(topology as FailoverTopology).label}; 2 instances, ${args.loops} loops, source latency ${args['latency-ms']} ms, runtime ${((performance.now() - began) / 1000).toFixed(1)} s`,
    body: [
      columns(rows, [
        'phase',
        'shard',
        'requests',
        'not 200',
        'p50 ms',
        'p99 ms',
        'max ms',
        'hot L1',
        'cold in L2',
      ]),
      `  replica promoted ${promotionMs} ms after the kill; lost shard filled L2 again ${fill}; L1 flushes per instance: ${l1Flushes.join(' / ')}`,
      '  cold in L2: cold GETs whose id, read again on the other instance after the run, cost the source nothing',
    ],
    rows,
    promotionMs,
    checks: [
      ...(args.mode === 'cluster'
        ? [
            all200('other shards: no request fails, in any phase', other),
            p99Check('other shards: p99 during the failover', p99('1 baseline'), p99('2 failover')),
            check(
              'other shards keep filling L2 during the failover: degraded for the lost shard only (counted at the source)',
              otherFilled.length > 0 && inL2(otherFilled) === otherFilled.length,
              `${inL2(otherFilled)} of ${otherFilled.length} cold GETs in L2`,
            ),
          ]
        : []),
      all200(
        'lost shard: every GET answered 200 (from L1 or the source), in every phase',
        lostGets,
      ),
      check(
        'a PUT fails only with ECC_VALKEY_UNAVAILABLE (its shard has no primary)',
        badPuts.length === 0,
        `${refused.length} PUTs refused, ${badPuts.length} of them otherwise (${badPuts.map((s) => s.code).join(', ') || 'none'})`,
      ),
      boundCheck(
        samples,
        ' (waitTimeoutMs + loadTimeoutMs + commandTimeoutMs + 1000), nor goes unanswered',
        (s) => s.status === 0,
      ),
      check(
        `fills resume on the lost shard: cold GETs from ${LEARN_MS} ms after the promotion on reach L2 (counted at the source)`,
        after.length > 0 && inL2(after) === after.length,
        `${inL2(after)} of ${after.length} in L2 (during the failover: ${inL2(outage)} of ${outage.length}, the rest answered from the source)`,
      ),
    ],
  };
});

/**
 * Whether each cold GET's fill reached L2, counted at the source: its id is read again on the
 * other instance (8 at a time); the source seeing no second read means the value came from L2.
 */
async function judgeFills(samples: ShardSample[], targets: string[], origin: Origin) {
  const cold = samples.filter((s) => s.kind === 'cold GET' && s.status === 200);
  await inLanes(8, cold, async (s) => {
    await request(targets[1 - s.target] as string, TABLE, s.id);
    s.inL2 = origin.readsOf(s.id) === 1;
  });
}
