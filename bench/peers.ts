/**
 * echostore beside async-cache-dedupe and bentocache, one run, one machine, the same loader
 * and Redis: warm gets, herds, a fleet herd, a storm and a hot key, each cold figure in fresh
 * processes, peers interleaved round by round. Prints figures and targets; asserts nothing. Usage:
 * drills/README.md#benchpeers.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { LRUCache } from 'lru-cache';
import { drillArgs, float, int, text, valkeyOption } from '../drills/lib/cli.js';
import { Reaper } from '../drills/lib/reaper.js';
import { columns, machineLine, median, opsPerSecond, percentile } from '../drills/lib/report.js';
import { runWorkers, together } from '../drills/lib/workers.js';
import { zipfSampler } from '../drills/lib/zipf.js';
import { fleetWake } from './fleet-wake.js';
import { makePeer, PEERS, type PeerName, sleepLoader, versionOf } from './peers-lib.js';
import type { Result, Setup } from './peers-worker.js';

const args = drillArgs({
  rounds: int(3, 1, 100),
  'latency-ms': float(20, 0, 2_000),
  seconds: float(1, 0.1, 600),
  // `wake` alone: the fleet cold read's round trips and waiter wake-up (`fleet` prints it too).
  only: text('warm,herd,fleet,storm,hot'),
  valkey: valkeyOption(),
});
const { rounds, valkey } = args;
const latencyMs = args['latency-ms'];
const only = new Set(args.only.split(','));
const WORKER = fileURLToPath(new URL('./peers-worker.js', import.meta.url));
const reaper = new Reaper();
const report: Record<string, unknown> = {};
const out: string[] = [];

const print = (title: string, rows: Array<Array<string | number>>, header?: string[]) => {
  const text = `${title}\n${columns(rows, header)}\n`;
  out.push(text);
  process.stdout.write(`${text}\n`);
};
const fmt = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
const tagOf = (what: string) => `pb-${what}-${randomBytes(4).toString('hex')}`;

/** A round of one peer in `processes` fresh processes, all firing at one moment. */
async function coldRound(
  peer: PeerName,
  shapes: Setup['shape'][],
  tag: string,
  policy?: Record<string, unknown>,
): Promise<{ latencies: number[]; failed: number; reads: number; loaderMs: number }> {
  const setups: Setup[] = shapes.map((shape) => ({
    kind: 'setup',
    peer,
    valkey,
    tag,
    latencyMs,
    shape,
    ...(policy === undefined ? {} : { policy }),
  }));
  const results = await runWorkers<Result>(WORKER, setups, together(200, 120_000), reaper);
  const loader = results.flatMap((r) => r.loaderMs);
  return {
    latencies: results.flatMap((r) => r.latenciesMs),
    failed: results.reduce((n, r) => n + r.failed, 0),
    reads: results.reduce((n, r) => n + r.sourceReads, 0),
    loaderMs: loader.length === 0 ? latencyMs : median(loader),
  };
}

interface ColdFigures {
  reads: number;
  failed: number;
  p99: number;
  overhead: number;
  worstOverhead: number;
}

/** `rounds` cold rounds of every peer, interleaved; medians over rounds. */
async function coldRounds(
  what: string,
  shapes: (round: number) => Setup['shape'][],
  policy?: Record<string, unknown>,
  n = rounds,
  peers: PeerName[] = PEERS,
): Promise<Record<PeerName, ColdFigures>> {
  const per = Object.fromEntries(
    PEERS.map((p) => [
      p,
      { reads: [] as number[], failed: 0, p99: [] as number[], over: [] as number[] },
    ]),
  ) as Record<PeerName, { reads: number[]; failed: number; p99: number[]; over: number[] }>;
  for (let round = 0; round < n; round++) {
    for (const peer of peers) {
      const r = await coldRound(
        peer,
        shapes(round),
        tagOf(what),
        peer === 'echostore' ? policy : undefined,
      );
      const p99 = percentile(r.latencies, 99);
      const f = per[peer];
      f.reads.push(r.reads);
      f.failed += r.failed;
      f.p99.push(p99);
      f.over.push(p99 - r.loaderMs);
    }
  }
  return Object.fromEntries(
    peers.map((p) => {
      const f = per[p];
      return [
        p,
        {
          reads: median(f.reads),
          failed: f.failed,
          p99: median(f.p99),
          overhead: median(f.over),
          worstOverhead: Math.max(...f.over),
        },
      ];
    }),
  ) as Record<PeerName, ColdFigures>;
}

async function warm(): Promise<void> {
  const KEYS = 1_000;
  const ids = Array.from({ length: KEYS }, (_, i) => String(i + 1));
  const loader = sleepLoader(0);
  const lru = new LRUCache<string, object>({ max: KEYS * 2 });
  for (const id of ids) lru.set(id, await loader.load(id));
  const peers = {
    echostore: await makePeer('echostore', { valkey, tag: tagOf('warm'), load: loader.load }),
    'async-cache-dedupe': await makePeer('async-cache-dedupe', {
      valkey,
      tag: 'warm',
      load: loader.load,
      storage: 'memory',
    }),
    bentocache: await makePeer('bentocache', { valkey, tag: tagOf('warm'), load: loader.load }),
  };
  for (const p of Object.values(peers)) for (const id of ids) await p.get(id);
  const es = peers.echostore;
  const ops: Record<string, (i: number) => Promise<unknown>> = {
    'lru-cache get, awaited': async (i) => lru.get(ids[i % KEYS] as string),
    'echostore Table.get': (i) => es.get(ids[i % KEYS] as string),
    'echostore Table.get + .value': async (i) =>
      ((await es.get(ids[i % KEYS] as string)) as { value: unknown }).value,
    'async-cache-dedupe (memory storage)': (i) =>
      peers['async-cache-dedupe'].get(ids[i % KEYS] as string),
    'bentocache (L1 + L2)': (i) => peers.bentocache.get(ids[i % KEYS] as string),
  };
  const ms = args.seconds * 1000;
  for (const op of Object.values(ops)) await opsPerSecond(200, op);
  const samples: Record<string, number[]> = Object.fromEntries(
    Object.keys(ops).map((k) => [k, []]),
  );
  for (let r = 0; r < Math.max(3, rounds); r++) {
    for (const [name, op] of Object.entries(ops)) samples[name]?.push(await opsPerSecond(ms, op));
  }
  for (const p of Object.values(peers)) await p.close();
  const floor = median(samples['lru-cache get, awaited'] as number[]);
  const rows = Object.entries(samples).map(([name, xs]) => [
    name,
    `${(median(xs) / 1e6).toFixed(2)} M`,
    (median(xs) / floor).toFixed(2),
  ]);
  const es2 = median(samples['echostore Table.get'] as number[]) / floor;
  report.warm = Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, median(xs)]));
  print(
    `warm get, ${KEYS} keys, ${args.seconds} s × ${Math.max(3, rounds)} rounds (median)`,
    [
      ...rows,
      ['target: Table.get ≥ 0.9 × awaited lru-cache get', fmt(es2, 2), es2 >= 0.9 ? 'met' : 'GAP'],
    ],
    ['', 'ops/s', '÷ lru awaited'],
  );
}

function coldTable(
  title: string,
  figures: Record<PeerName, ColdFigures>,
  extra: Array<Array<string | number>> = [],
): void {
  const es = figures.echostore;
  const rows = PEERS.map((p) => {
    const f = figures[p];
    return [
      p,
      f.reads,
      f.failed,
      fmt(f.p99),
      fmt(f.overhead),
      fmt(f.worstOverhead),
      p === 'echostore' ? '' : fmt(es.overhead / f.overhead, 2),
    ];
  });
  print(
    title,
    [...rows, ...extra],
    [
      'peer',
      'source reads',
      'failed',
      'p99 ms',
      'p99 − loader ms',
      'worst round',
      'echostore ÷ peer',
    ],
  );
}

const verdict = (ok: boolean) => (ok ? 'met' : 'GAP');

async function herd(): Promise<void> {
  const f = await coldRounds('herd', (r) => [{ kind: 'herd', id: `h${r}`, readers: 200 }]);
  report.herd = f;
  const es = f.echostore;
  coldTable(`herd: 200 cold readers of one id, fresh process, ${rounds} rounds (median)`, f, [
    ['target: p99 − loader ≤ 3 ms', '', '', '', fmt(es.overhead), '', verdict(es.overhead <= 3)],
  ]);
}

async function fleet(): Promise<void> {
  const f = await coldRounds('fleet', (r) =>
    Array.from({ length: 6 }, () => ({ kind: 'herd' as const, id: `f${r}`, readers: 200 })),
  );
  report.fleet = f;
  const es = f.echostore;
  coldTable(`fleet herd: 6 processes × 200 cold readers of one id, ${rounds} rounds (median)`, f, [
    [
      'target: p99 − loader ≤ 10 ms, 1 source read',
      es.reads,
      '',
      '',
      fmt(es.overhead),
      '',
      verdict(es.overhead <= 10 && es.reads === 1),
    ],
  ]);
  if (!only.has('wake')) await wake();
}

/** The fleet cold read's round trips and waiter wake-up (`fleet-wake.ts`). */
async function wake(): Promise<void> {
  report.fleetWake = await fleetWake({ rounds, latencyMs, reaper, worker: WORKER, tagOf, print });
}

async function storm(): Promise<void> {
  const PROCS = 4;
  const READS = 4_000;
  const KEYS = 1_000;
  const sequences = Array.from({ length: PROCS }, (_, i) =>
    Array.from({ length: READS }, zipfSampler(KEYS, 1.2, 1_000 + i)).map((k) => k - 1),
  );
  const distinct = new Set(sequences.flat()).size;
  const f = await coldRounds(
    'storm',
    () =>
      sequences.map((seq) => ({ kind: 'storm', ids: seq.map((k) => `k${k}`), concurrency: 128 })),
    undefined,
    Math.max(1, Math.ceil(rounds / 2)),
  );
  // What growing the load limit buys here: echostore once more with it fixed at 16 (a ceiling of
  // 16, where it starts), as it was before the limit could grow past its start.
  const fixed = (
    await coldRounds(
      'storm16',
      () =>
        sequences.map((seq) => ({ kind: 'storm', ids: seq.map((k) => `k${k}`), concurrency: 128 })),
      { maxConcurrentLoads: 16 },
      Math.max(1, Math.ceil(rounds / 2)),
      ['echostore'],
    )
  ).echostore;
  report.storm = { distinct, ...f, echostoreFixed16: fixed };
  const es = f.echostore;
  const acd = f['async-cache-dedupe'];
  const rows = PEERS.map((p) => [
    p,
    fmt(f[p].reads / distinct, 2),
    f[p].failed,
    fmt(f[p].p99),
    p === 'echostore' ? '' : fmt(es.p99 / f[p].p99, 2),
  ]);
  rows.push([
    'echostore, maxConcurrentLoads 16 (the limit fixed at its start)',
    fmt(fixed.reads / distinct, 2),
    fixed.failed,
    fmt(fixed.p99),
    fmt(es.p99 / fixed.p99, 2),
  ]);
  print(
    `cold storm: ${PROCS} processes × ${READS} reads, 128 at a time, Zipf 1.2 over ${KEYS} keys (${distinct} distinct read)`,
    [
      ...rows,
      [
        'target: reads ÷ distinct = 1.00, p99 ≤ 1.2 × async-cache-dedupe',
        fmt(es.reads / distinct, 2),
        '',
        fmt(es.p99),
        verdict(es.reads === distinct && es.p99 <= 1.2 * acd.p99),
      ],
    ],
    ['peer', 'reads ÷ distinct', 'failed', 'p99 ms', 'echostore ÷ peer'],
  );
}

async function hot(): Promise<void> {
  for (const readers of [2_000, 20_000]) {
    const f = await coldRounds(`hot${readers}`, (r) => [{ kind: 'herd', id: `x${r}`, readers }]);
    report[`hot${readers}`] = f;
    const es = f.echostore;
    const acd = f['async-cache-dedupe'];
    coldTable(
      `hot key: ${readers} concurrent readers of one cold id, one process, ${rounds} rounds`,
      f,
      [
        [
          'target: p99 − loader ≤ 1.5 × async-cache-dedupe, none shed',
          '',
          es.failed,
          '',
          fmt(es.overhead),
          '',
          verdict(es.failed === 0 && es.overhead <= 1.5 * acd.overhead),
        ],
      ],
    );
  }
}

const header = [
  `bench:peers ${new Date().toISOString()}`,
  machineLine(),
  `peers: echostore (this tree), ${versionOf('async-cache-dedupe')}, ${versionOf('bentocache')}`,
  `loader: sleep ${latencyMs} ms; redis: ${valkey}`,
].join('\n');
out.push(header);
process.stdout.write(`${header}\n\n`);
if (only.has('warm')) await warm();
if (only.has('herd')) await herd();
if (only.has('fleet')) await fleet();
if (only.has('wake')) await wake();
if (only.has('storm')) await storm();
if (only.has('hot')) await hot();
if (args.json !== undefined) {
  writeFileSync(
    args.json,
    `${JSON.stringify({ header, report, text: out.join('\n') }, null, 2)}\n`,
  );
}
process.exit(0);
