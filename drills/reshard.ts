/**
 * Reshard drill: two services under load over a 3+3 cluster while slots that hold their keys
 * move to another primary → no GET or PUT fails, the source sees no read (counted at the origin),
 * the GETs' p99 during the move stays within 2× the baseline's. Usage and laws:
 * drills/README.md#reshard.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  beginSlotMove,
  type ClusterNode,
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
  all200,
  boundCheck,
  FAULT_POLICY,
  type FaultPair,
  p99Check,
  request,
  startFaultPair,
} from './lib/fault-policy.js';
import { readItems, readyz, type Timed } from './lib/http.js';
import { Loops, pick, summarize } from './lib/load.js';
import { addCounts, bump, check, columns, listCounts, sum } from './lib/report.js';

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
/** L1 rows expire quickly, so most GETs are answered by L2: the layer a migration touches. */
const POLICY = { ...FAULT_POLICY, l1: { ttlMs: 100 } };
const PHASES = ['1 baseline', '2 move', '3 after'] as const;

/** One request as the client saw it. */
interface Sample extends Timed {
  phase: string;
  kind: 'GET' | 'PUT';
  /** Its id's slot is one of those moved. */
  moving: boolean;
}

runDrill('reshard', args.json, async () => {
  process.env.LOG_LEVEL ??= 'error';
  const began = performance.now();
  const run = randomBytes(3).toString('hex');
  let cluster: LocalCluster | undefined;
  let pair: FaultPair | undefined;
  let load: Loops<Sample> | undefined;
  const move = { keys: 0, ms: 0 };
  type Counts = Record<string, number>;
  const [notReady, redirects, retries, phaseMs]: Counts[] & { length: 4 } = [{}, {}, {}, {}];
  let [warmUpReads, duringLoad] = [0, 0];
  const moving = idsIn(`m-${run}`, args.ids, (slot) => slot < args.slots);
  const other = idsIn(`o-${run}`, Math.ceil(args.ids / 2), (slot) => slot >= args.slots);
  const written = idsIn(`w-${run}`, 20, (slot) => slot < args.slots);
  try {
    cluster = await spawnCluster();
    pair = await startFaultPair({ ...cluster.valkey }, TABLE, args['latency-ms'], POLICY);
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
        const body = put ? { id, write: ++writes } : undefined;
        const answered = await request(pick(targets) as string, TABLE, id, body);
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
    const from = (await cluster.primaryOf(0)) as ClusterNode;
    const to = (await livePrimaries(cluster.nodes)).find((n) => n !== from);
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
    move.keys = await moveSlots(cluster, from, to);
    move.ms = Math.round(gen.now() - at);
    next(PHASES[2]);
    await sleep(args['after-s'] * 1_000);
    next('stopped');
    await gen.stop();
    duringLoad = sum(read, (id) => origin.readsOf(id)) - read.length;
    for (const s of services) {
      const m = await scrape(s.url);
      for (const x of m.filter((x) => x.name === 'echostore_valkey_redirects_total'))
        bump(redirects, x.labels.kind as string, x.value);
      addCounts(retries, byLabels(m, 'echostore_valkey_retries_total', TABLE));
    }
  } finally {
    await load?.stop();
    await pair?.stop();
    await cluster?.stop();
  }
  const samples = load?.samples ?? [];
  const of = (phase: string, kind: string, moving = [true, false]) =>
    samples.filter((s) => s.phase === phase && s.kind === kind && moving.includes(s.moving));
  // biome-ignore format: a table
  const kinds = [['GET', true], ['GET', false], ['PUT', true]] as const;
  const rows = PHASES.flatMap((p) =>
    kinds.map(([kind, moving]) => {
      const r = summarize(of(p, kind, [moving]));
      const perSecond = phaseMs[p] ? Math.round((r.requests * 1000) / (phaseMs[p] as number)) : 0;
      const what = `${kind} ${moving ? 'moved slots' : 'other slots'}`;
      return [p, what, r.requests, perSecond, listCounts(r.failed), r.p50Ms, r.p99Ms, r.maxMs];
    }),
  );
  const ofKind = (kind: string) => samples.filter((s) => s.kind === kind);
  const p99 = (phase: string) => summarize(of(phase, 'GET')).p99Ms;
  const redirected = (redirects.ask ?? 0) + (redirects.tryagain ?? 0);
  return {
    title: `reshard drill: slots 0–${args.slots - 1} (${move.keys} keys) moved via ${args.via} in ${move.ms} ms; ${args.loops} loops over 2 services; ids: ${moving.length} in moved slots, ${other.length} elsewhere, ${written.length} written`,
    body: [
      columns(rows, ['phase', 'requests', 'n', 'per s', 'failed', 'p50 ms', 'p99 ms', 'max ms']),
    ],
    figures: { runtime: `${((performance.now() - began) / 1000).toFixed(1)} s` },
    rows,
    phaseMs,
    checks: [
      all200('no GET fails, in any phase', ofKind('GET')),
      all200('no PUT fails, in any phase', ofKind('PUT')),
      check(
        'the move costs the source nothing: no read after the warm-up (counted at the origin)',
        duringLoad === 0,
        `${duringLoad} reads during the load (warm-up: ${warmUpReads})`,
      ),
      p99Check('GET p99 during the move', p99(PHASES[0]), p99(PHASES[1])),
      check(
        '/readyz said ready throughout (a migration does not degrade the store)',
        Object.keys(notReady).length === 0,
        listCounts(notReady, 'always ready'),
      ),
      check(
        'the services met the move (ASK or TRYAGAIN counted)',
        redirected > 0,
        `redirects ${listCounts(redirects)}; key-by-key retries ${listCounts(retries)}`,
      ),
      boundCheck(samples),
    ],
  };
});

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
 * Moves slots 0 … `--slots`−1 (`from`'s lowest) to `to`, `--via` `setslot` (slowed down, holding
 * each half-moved state `--hold-ms`) or `redis-cli` (drills/README.md#reshard); the keys moved.
 */
async function moveSlots(cluster: LocalCluster, from: ClusterNode, to: ClusterNode) {
  let keys = 0;
  if (args.via === 'redis-cli') {
    const [fromId, toId] = await Promise.all(
      [from, to].map((n) => ask(n, (r) => r.cluster('MYID'))),
    );
    for (let s = 0; s < args.slots; s++) {
      keys += Number(await ask(from, (r) => r.cluster('COUNTKEYSINSLOT', s)));
    }
    const ids = ['--cluster-from', fromId as string, '--cluster-to', toId as string];
    const slots = ['--cluster-slots', String(args.slots), '--cluster-yes'];
    await cluster.cli(['--cluster', 'reshard', from.address, ...ids, ...slots], 120_000);
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
  return keys;
}
