/**
 * echostore beside async-cache-dedupe and bentocache, one run, one machine, the same loader
 * and Redis: warm gets, herds, a fleet herd, a storm and a hot key, each cold figure in fresh
 * processes, peers interleaved round by round. Prints figures and targets; asserts nothing. Usage:
 * drills/README.md#benchpeers.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { drillArgs, float, int, text, valkeyOption } from '../drills/lib/cli.js';
import { Reaper } from '../drills/lib/reaper.js';
import { columns, machineLine, median, opsPerSecond, percentile } from '../drills/lib/report.js';
import { runWorkers, together } from '../drills/lib/workers.js';
import { zipfSampler } from '../drills/lib/zipf.js';
import { spawnValkey } from '../harness/valkey-server.js';
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
      ['target: Table.get ≥ 0.8 × awaited lru-cache get', fmt(es2, 2), es2 >= 0.8 ? 'met' : 'GAP'],
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
  if (!only.has('wake')) await fleetWake();
}

/** Commands the scripts run (INFO commandstats counts them too): not round trips of their own. */
const IN_SCRIPTS = new Set(['time', 'get', 'set', 'pttl', 'del', 'publish', 'pexpire']);
/** The bench's own commands, a worker's goodbye, and the subscriber's heartbeat (not the read's). */
const NOT_COUNTED = new Set(['config|resetstat', 'info', 'quit', 'ping']);

/**
 * Round trips in `INFO commandstats` (`info`): `scripts` is every EVALSHA and EVAL less the
 * store's health probes (a script that writes, reads and deletes one hash field, each probe
 * one `HDEL`), `probes` those, `other` every other command a client sent (an epochs `HGETALL`).
 */
function roundTrips(info: string): { scripts: number; probes: number; other: number } {
  const calls = Object.fromEntries(
    [...info.matchAll(/^cmdstat_([\w|-]+):calls=(\d+)/gm)].map((m) => [m[1], Number(m[2])]),
  ) as Record<string, number>;
  const probes = calls.hdel ?? 0;
  const probeInner = new Set(['hset', 'hget', 'hdel', 'hgetall']);
  const other =
    Object.entries(calls)
      .filter(([c]) => !IN_SCRIPTS.has(c) && !NOT_COUNTED.has(c) && !probeInner.has(c))
      .filter(([c]) => c !== 'evalsha' && c !== 'eval')
      .reduce((n, [, x]) => n + x, 0) + Math.max(0, (calls.hgetall ?? 0) - probes);
  return { scripts: (calls.evalsha ?? 0) + (calls.eval ?? 0) - probes, probes, other };
}

/**
 * The fleet cold read on a redis-server of the bench's own (a free port: `CONFIG RESETSTAT`
 * touches nobody else's counters), echostore alone, in two ways side by side, interleaved round
 * by round: the fill's event carrying the value (the default) and carrying its version only
 * (`fillEventMaxBytes: 0`: how every waiter woke before issue 22, reading L2 once more). Counts
 * the Valkey round trips (scripts run, from `INFO commandstats`) of the holder (a round of one
 * process) and of a waiter (a round of six, less the holder's, ÷ 5), and times each waiter's
 * answer from the moment Valkey wrote the value (its version: Valkey's µs clock, one host).
 */
async function fleetWake(): Promise<void> {
  const server = await spawnValkey({ track: (child) => reaper.track(child) });
  const admin = new Redis(server.url, { maxRetriesPerRequest: 0 });
  const variants = [
    { name: 'fill event with the value (default)', policy: {} },
    { name: 'fill event with the version only (before)', policy: { fillEventMaxBytes: 0 } },
  ];
  const per = variants.map(() => ({
    holder: [] as number[],
    waiter: [] as number[],
    other: 0,
    reads: [] as number[],
    over: [] as number[],
    wakeMs: [] as number[],
    firstMs: [] as number[],
    holderMs: [] as number[],
    pairMs: [] as number[],
    probes: 0,
    info: [] as string[],
  }));
  const measured = async (setups: Setup[]) => {
    const results = await runWorkers<Result>(
      WORKER,
      setups,
      async () => {
        await admin.config('RESETSTAT');
        return together(200, 120_000)();
      },
      reaper,
    );
    const info = (await admin.info('commandstats')) as string;
    return { results, ...roundTrips(info), info };
  };
  try {
    // Loads the scripts into the server once (a first EVALSHA answered NOSCRIPT is one more trip).
    await measured([wakeSetup(server.url, tagOf('wake'), 'warm', {})]);
    for (let round = 0; round < rounds; round++) {
      for (const [i, v] of variants.entries()) {
        const f = per[i] as (typeof per)[number];
        const tag = tagOf('wake');
        const alone = await measured([wakeSetup(server.url, tag, `a${round}`, v.policy)]);
        const fleet = await measured(
          Array.from({ length: 6 }, () => wakeSetup(server.url, tag, `w${round}`, v.policy)),
        );
        f.info.push(alone.info, fleet.info);
        f.probes += alone.probes + fleet.probes;
        f.holder.push(alone.scripts);
        f.waiter.push((fleet.scripts - alone.scripts) / 5);
        f.other += alone.other + fleet.other;
        f.reads.push(fleet.results.reduce((n, r) => n + r.sourceReads, 0));
        const loader = fleet.results.flatMap((r) => r.loaderMs);
        const latencies = fleet.results.flatMap((r) => r.latenciesMs);
        f.over.push(percentile(latencies, 99) - (loader.length > 0 ? median(loader) : latencyMs));
        for (const r of fleet.results) {
          (r.sourceReads > 0 ? f.holderMs : f.wakeMs).push(...r.sinceWriteMs);
          // The waiter's flight woke at its first answer; the rest is handing it to 200 callers.
          f.firstMs.push(...r.wokeMs);
        }
        // Two processes, one reader each, 40 ids 50 ms apart: the wake-up without a herd's CPU.
        const ids = Array.from({ length: PAIR_IDS }, (_, k) => `p${round}-${k}`);
        const pair = await runWorkers<Result>(
          WORKER,
          [0, 1].map(() => ({ ...wakeSetup(server.url, tag, '', v.policy), shape: paced(ids) })),
          together(200, 120_000),
          reaper,
        );
        f.pairMs.push(...pair.flatMap((r) => r.wokeMs));
      }
    }
  } finally {
    admin.disconnect();
    await server.stop();
  }
  report.fleetWake = Object.fromEntries(
    variants.map((v, i) => {
      const f = per[i] as (typeof per)[number];
      return [
        v.name,
        {
          holderTrips: median(f.holder),
          waiterTrips: median(f.waiter),
          otherCommands: f.other,
          reads: median(f.reads),
          overheadMs: median(f.over),
          wakeP50Ms: percentile(f.wakeMs, 50),
          wakeP99Ms: percentile(f.wakeMs, 99),
          firstAnswerP50Ms: percentile(f.firstMs, 50),
          firstAnswerP99Ms: percentile(f.firstMs, 99),
          holderReadersP50Ms: percentile(f.holderMs, 50),
          pairWakeP50Ms: percentile(f.pairMs, 50),
          pairWakeP99Ms: percentile(f.pairMs, 99),
          pairSamples: f.pairMs.length,
          probes: f.probes,
          commandstats: f.info,
        },
      ];
    }),
  );
  const rows = variants.map((v, i) => {
    const f = per[i] as (typeof per)[number];
    return [
      v.name,
      median(f.reads),
      fmt(median(f.holder)),
      fmt(median(f.waiter)),
      f.other,
      fmt(percentile(f.firstMs, 50), 2),
      fmt(percentile(f.firstMs, 99), 2),
      fmt(percentile(f.wakeMs, 50), 2),
      fmt(percentile(f.wakeMs, 99), 2),
      fmt(median(f.over)),
      `${fmt(percentile(f.pairMs, 50), 2)} / ${fmt(percentile(f.pairMs, 99), 2)}`,
    ];
  });
  print(
    `fleet cold read, echostore: 6 processes × 200 readers of one id, own redis-server, ${rounds} rounds (median; wake: from Valkey's write of the value to a waiter process's first answer, and to each of its answers; then 2 processes × 1 reader, ${PAIR_IDS} ids per round; load average ${loadavg()[0]?.toFixed(1)})`,
    rows,
    [
      '',
      'source reads',
      'holder round trips',
      'waiter round trips',
      'other commands, all rounds',
      'first answer p50 ms',
      'first answer p99 ms',
      'every answer p50 ms',
      'every answer p99 ms',
      'p99 − loader ms',
      '2 × 1 reader: wake p50 / p99 ms',
    ],
  );
}

const PAIR_IDS = 40;
const paced = (ids: string[]): Setup['shape'] => ({ kind: 'paced', ids, everyMs: 50 });

/** One process of {@link fleetWake}: echostore, 200 readers of `id` in table `tag`. */
function wakeSetup(url: string, tag: string, id: string, policy: Record<string, unknown>): Setup {
  return {
    kind: 'setup',
    peer: 'echostore',
    valkey: url,
    tag,
    latencyMs,
    shape: { kind: 'herd', id, readers: 200 },
    policy,
    settleMs: 500,
  };
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
  // What the default 16-load ceiling costs here: echostore once more with 128 (the storm's concurrency).
  const wide = (
    await coldRounds(
      'storm128',
      () =>
        sequences.map((seq) => ({ kind: 'storm', ids: seq.map((k) => `k${k}`), concurrency: 128 })),
      { maxConcurrentLoads: 128 },
      1,
      ['echostore'],
    )
  ).echostore;
  report.storm = { distinct, ...f, echostoreCeiling128: wide };
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
    'echostore, maxConcurrentLoads 128 (not the default)',
    fmt(wide.reads / distinct, 2),
    wide.failed,
    fmt(wide.p99),
    '',
  ]);
  print(
    `cold storm: ${PROCS} processes × ${READS} reads, 128 at a time, Zipf 1.2 over ${KEYS} keys (${distinct} distinct read)`,
    [
      ...rows,
      [
        'target: reads ÷ distinct = 1.00, p99 ≤ 1.5 × async-cache-dedupe',
        fmt(es.reads / distinct, 2),
        '',
        fmt(es.p99),
        verdict(es.reads === distinct && es.p99 <= 1.5 * acd.p99),
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
if (only.has('wake')) await fleetWake();
if (only.has('storm')) await storm();
if (only.has('hot')) await hot();
if (args.json !== undefined) {
  writeFileSync(
    args.json,
    `${JSON.stringify({ header, report, text: out.join('\n') }, null, 2)}\n`,
  );
}
process.exit(0);
