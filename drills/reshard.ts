/**
 * Reshard drill: two services under load over a 3+3 cluster while slots that hold their keys
 * move to another primary → no GET or PUT fails, the source sees no read (counted at the origin),
 * the GETs' p99 during the move stays within 2× the baseline's. Usage and laws:
 * drills/README.md#reshard.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import {
  beginSlotMove,
  type ClusterNode,
  cliBinary,
  type LocalCluster,
  livePrimaries,
  spawnCluster,
} from '../harness/cluster.js';
import { byLabels, scrape } from '../harness/metrics.js';
import { ask } from '../harness/valkey-server.js';
import { valueKey } from '../src/l2/keys.js';
import { keySlot } from '../src/valkey/slots.js';
import { drillArgs, int, oneOf, runDrill } from './lib/cli.js';
import {
  FAULT_BOUND_MS as BOUND_MS,
  FAULT_POLICY,
  type FaultPair,
  startFaultPair,
} from './lib/fault-policy.js';
import { answer, itemUrl, readItems, readyz, type Timed } from './lib/http.js';
import { Loops, pick } from './lib/load.js';
import { Reaper } from './lib/reaper.js';
import {
  addCounts,
  bump,
  type Check,
  checkLines,
  columns,
  listCounts,
  p50p99,
  verdict,
} from './lib/report.js';

const args = drillArgs({
  via: oneOf('setslot', 'redis-cli'),
  slots: int(8, 1, 5_000),
  'hold-ms': int(500, 0, 10_000),
  ids: int(200, 1, 5_000),
  'warm-s': int(2, 0, 600),
  'baseline-s': int(5, 1, 600),
  'after-s': int(3, 1, 600),
  loops: int(8, 1, 200),
  'pause-ms': int(2, 0, 1_000),
  'latency-ms': int(20, 0, 1_000),
});

const TABLE = 'reshard';
const REQUEST_TIMEOUT_MS = 15_000;
/** L1 rows expire quickly, so most GETs are answered by L2: the layer a migration touches. */
const POLICY = { ...FAULT_POLICY, l1: { ttlMs: 100 } };
const PHASES = ['1 baseline', '2 move', '3 after'] as const;

/** One request as the client saw it. */
interface Sample extends Omit<Timed, 'body' | 'cacheStatus'> {
  phase: string;
  kind: 'GET' | 'PUT';
  /** Its id's slot is one of those moved. */
  moving: boolean;
}

async function main() {
  process.env.LOG_LEVEL ??= 'error';
  const began = performance.now();
  const reaper = new Reaper();
  const run = randomBytes(3).toString('hex');
  let cluster: LocalCluster | undefined;
  let pair: FaultPair | undefined;
  let load: Loops<Sample> | undefined;
  const move = { keys: 0, ms: 0, range: '' };
  const notReady: Record<string, number> = {};
  let warmUpReads = 0;
  let duringLoad = 0;
  const redirects: Record<string, number> = {};
  const retries: Record<string, number> = {};
  const phaseMs: Record<string, number> = {};
  const moving = idsIn(`m-${run}`, args.ids, (slot) => slot < args.slots);
  const other = idsIn(`o-${run}`, Math.ceil(args.ids / 2), (slot) => slot >= args.slots);
  const written = idsIn(`w-${run}`, 20, (slot) => slot < args.slots);
  try {
    cluster = await spawnCluster({ track: (c) => reaper.track(c) });
    pair = await startFaultPair(
      reaper,
      { cluster: { nodes: cluster.seeds } },
      TABLE,
      args['latency-ms'],
      POLICY,
    );
    const { origin, services, targets } = pair;
    const read = [...moving, ...other];
    await readItems(targets[0] as string, TABLE, read, 8);
    warmUpReads = origin.totalReads();
    let writes = 0;
    const gen: Loops<Sample> = new Loops({
      loops: args.loops,
      pauseMs: args['pause-ms'],
      async step(phase) {
        const put = Math.random() < 0.1;
        const id = (put ? pick(written) : pick(read)) as string;
        const url = itemUrl(pick(targets) as string, TABLE, id);
        const answered = await answer(
          url,
          REQUEST_TIMEOUT_MS,
          put ? { id, write: ++writes } : undefined,
        );
        return { phase, kind: put ? 'PUT' : 'GET', moving: !other.includes(id), ...answered };
      },
    });
    load = gen;
    const probe = async () => {
      while (gen.running) {
        for (const url of targets) {
          const status = (await readyz(url)).status ?? 'no answer';
          if (status !== 'ready') bump(notReady, `${gen.phase}: ${status}`);
        }
        await sleep(100);
      }
    };
    // Not judged: the services' and the client's first seconds (JIT, connections) are slower.
    gen.phase = '0 warm-up';
    gen.start(probe);
    await sleep(args['warm-s'] * 1_000);
    const owner = await cluster.primaryOf(0);
    const to = (await livePrimaries(cluster.nodes)).find((n) => n !== owner);
    if (to === undefined) throw new Error('no other primary');
    let at = gen.now();
    const next = (phase: string) => {
      phaseMs[gen.phase] = Math.round(gen.now() - at);
      at = gen.now();
      gen.phase = phase;
    };
    next(PHASES[0]);
    await sleep(args['baseline-s'] * 1_000);
    next(PHASES[1]);
    Object.assign(move, await moveSlots(cluster, to));
    move.ms = Math.round(gen.now() - at);
    next(PHASES[2]);
    await sleep(args['after-s'] * 1_000);
    next('stopped');
    await gen.stop();
    duringLoad = read.reduce((n, id) => n + origin.readsOf(id), 0) - read.length;
    for (const s of services) {
      const samples = await scrape(s.url);
      for (const m of samples) {
        if (m.name === 'echostore_valkey_redirects_total')
          bump(redirects, m.labels.kind as string, m.value);
      }
      addCounts(retries, byLabels(samples, 'echostore_valkey_retries_total', TABLE));
    }
  } finally {
    await load?.stop();
    await pair?.stop();
    await cluster?.stop();
    reaper.killAll();
  }
  const samples = load?.samples ?? [];
  const rows = PHASES.flatMap((p) => [
    phaseRow(samples, p, phaseMs[p] ?? 0, 'GET', true),
    phaseRow(samples, p, phaseMs[p] ?? 0, 'GET', false),
    phaseRow(samples, p, phaseMs[p] ?? 0, 'PUT', true),
  ]);
  const report = {
    drill: 'reshard' as const,
    via: args.via,
    slotsMoved: move.range,
    keysMoved: move.keys,
    moveMs: move.ms,
    loops: args.loops,
    ids: { moving: moving.length, other: other.length, written: written.length },
    rows,
    phaseMs,
    sourceReads: { warmUp: warmUpReads, duringLoad },
    redirects,
    retries,
    notReady,
    runtimeMs: Math.round(performance.now() - began),
  };
  const checks = judge(samples, report);
  return { ...report, checks, pass: checks.every((c) => c.pass) };
}

type Report = Awaited<ReturnType<typeof main>>;

/** The first `n` ids `<prefix>-<i>` whose slot passes `keep`. */
function idsIn(prefix: string, n: number, keep: (slot: number) => boolean): string[] {
  const ids: string[] = [];
  for (let i = 0; ids.length < n; i++) {
    const id = `${prefix}-${i}`;
    if (keep(keySlot(valueKey(TABLE, id)))) ids.push(id);
  }
  return ids;
}

/**
 * Moves slots 0 … `--slots`−1 (the first primary's lowest) to `to`: with
 * `setslot`, slot by slot as `redis-cli --cluster reshard` does, holding each
 * half-moved `--hold-ms` with its keys still on the owner and again with them
 * moved; with `redis-cli`, by `redis-cli --cluster reshard … --cluster-yes`.
 */
async function moveSlots(cluster: LocalCluster, to: ClusterNode) {
  const range = `${0}–${args.slots - 1}`;
  let keys = 0;
  if (args.via === 'redis-cli') {
    const from = (await cluster.primaryOf(0)) as ClusterNode;
    const [fromId, toId] = await Promise.all(
      [from, to].map((n) => ask(n, (r) => r.cluster('MYID'))),
    );
    for (let s = 0; s < args.slots; s++) {
      keys += Number(await ask(from, (r) => r.cluster('COUNTKEYSINSLOT', s)));
    }
    await promisify(execFile)(
      cliBinary(),
      [
        ...['--cluster', 'reshard', from.address],
        ...['--cluster-from', fromId as string, '--cluster-to', toId as string],
        ...['--cluster-slots', String(args.slots), '--cluster-yes'],
      ],
      { timeout: 120_000 },
    );
  } else {
    for (let s = 0; s < args.slots; s++) {
      const slot = await beginSlotMove(cluster, s, to);
      await sleep(args['hold-ms']);
      const inSlot = await ask(slot.from, (r) => r.cluster('GETKEYSINSLOT', s, 1_000));
      keys += inSlot.length;
      await slot.moveKeys(inSlot);
      await sleep(args['hold-ms']);
      await slot.finish();
    }
  }
  const owner = await cluster.primaryOf(args.slots - 1);
  if (owner !== to) throw new Error(`slot ${args.slots - 1} did not move to ${to.address}`);
  return { keys, range };
}

/** What the clients saw of one kind of request during one phase. */
function phaseRow(
  samples: Sample[],
  phase: string,
  durationMs: number,
  kind: Sample['kind'],
  moving: boolean,
) {
  const mine = samples.filter((s) => s.phase === phase && s.kind === kind && s.moving === moving);
  const failed: Record<string, number> = {};
  for (const s of mine) if (s.status !== 200) bump(failed, s.code ?? String(s.status));
  return {
    phase,
    what: `${kind} ${moving ? 'moved slots' : 'other slots'}`,
    requests: mine.length,
    perSecond: durationMs > 0 ? Math.round((mine.length * 1000) / durationMs) : 0,
    failed,
    ...p50p99(
      mine.map((s) => s.ms),
      1,
    ),
    maxMs: Math.round(Math.max(0, ...mine.map((s) => s.ms))),
  };
}

/** The laws, judged on what the clients and the source saw. */
function judge(samples: Sample[], report: Omit<Report, 'checks' | 'pass'>): Check[] {
  const gets = samples.filter((s) => s.kind === 'GET');
  const failedGets = gets.filter((s) => s.status !== 200);
  const puts = samples.filter((s) => s.kind === 'PUT');
  const failedPuts = puts.filter((s) => s.status !== 200);
  const p99 = (phase: string) =>
    p50p99(
      gets.filter((s) => s.phase === phase).map((s) => s.ms),
      1,
    ).p99Ms;
  const [before, during] = [p99(PHASES[0]), p99(PHASES[1])];
  const redirected = (report.redirects.ask ?? 0) + (report.redirects.tryagain ?? 0);
  const late = samples.filter((s) => s.ms > BOUND_MS);
  return [
    {
      name: 'no GET fails, in any phase',
      pass: failedGets.length === 0,
      detail: `${failedGets.length} of ${gets.length} not answered 200`,
    },
    {
      name: 'no PUT fails, in any phase',
      pass: failedPuts.length === 0,
      detail: `${failedPuts.length} of ${puts.length} not answered 200`,
    },
    {
      name: 'the move costs the source nothing: no read after the warm-up (counted at the origin)',
      pass: report.sourceReads.duringLoad === 0,
      detail: `${report.sourceReads.duringLoad} reads during the load (warm-up: ${report.sourceReads.warmUp})`,
    },
    {
      name: 'GET p99 during the move within 2× of the baseline',
      pass: during <= 2 * before,
      detail: `${during} ms against ${before} ms (limit ${Math.round(2 * before * 10) / 10} ms)`,
    },
    {
      name: '/readyz said ready throughout (a migration does not degrade the store)',
      pass: Object.keys(report.notReady).length === 0,
      detail: listCounts(report.notReady, 'always ready'),
    },
    {
      name: 'the services met the move (ASK or TRYAGAIN counted)',
      pass: redirected > 0,
      detail: `redirects ${listCounts(report.redirects)}; key-by-key retries ${listCounts(report.retries)}`,
    },
    {
      name: `no request waits past ${BOUND_MS} ms`,
      pass: late.length === 0,
      detail: `${late.length} late; slowest ${Math.round(Math.max(0, ...samples.map((s) => s.ms)))} ms`,
    },
  ];
}

function render(r: Report): string {
  const rows = r.rows.map((x) => [
    x.phase,
    x.what,
    x.requests,
    x.perSecond,
    listCounts(x.failed),
    x.p50Ms,
    x.p99Ms,
    x.maxMs,
  ]);
  return [
    `reshard drill: slots ${r.slotsMoved} (${r.keysMoved} keys) moved via ${r.via} in ${r.moveMs} ms; ${r.loops} loops over 2 services; ids: ${r.ids.moving} in moved slots, ${r.ids.other} elsewhere, ${r.ids.written} written`,
    columns(rows, ['phase', 'requests', 'n', 'per s', 'failed', 'p50 ms', 'p99 ms', 'max ms']),
    columns([
      [
        'source reads',
        `${r.sourceReads.warmUp} warm-up, ${r.sourceReads.duringLoad} during the load`,
      ],
      ['redirects', listCounts(r.redirects)],
      ['retries key by key', listCounts(r.retries)],
    ]),
    ...checkLines(r.checks),
    `${verdict(r.pass)} in ${(r.runtimeMs / 1000).toFixed(1)} s`,
    '',
  ].join('\n');
}

runDrill('reshard', args.json, main, render);
