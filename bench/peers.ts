/**
 * echostore beside async-cache-dedupe and bentocache, one run, one machine, the same loader and
 * Redis, each cold figure in fresh processes, peers interleaved round by round; then `bench --only
 * http` and `bench:memory` in child processes; then issue 22's table, every verdict computed from
 * this run's figures. Prints figures and targets; asserts nothing. Usage: drills/README.md#benchpeers.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { drillArgs, float, int, listOf, setUp, valkeyOption } from '../drills/lib/cli.js';
import {
  columns,
  machineLine,
  median,
  met,
  opsPerCpuSecond,
  percentile,
  sum,
} from '../drills/lib/report.js';
import { connectAdmin } from '../drills/lib/store.js';
import { runNode, runWorkers, together } from '../drills/lib/workers.js';
import { zipfSampler } from '../drills/lib/zipf.js';
import { spawnValkey } from '../harness/valkey-server.js';
import type { HttpFigures } from './bench.js';
import { makePeer, PEERS, type Peer, type PeerName, sleepLoader, versionOf } from './peers-lib.js';
import type { Result, Setup } from './peers-worker.js';

const args = drillArgs(
  {
    rounds: int(3, 1, 100),
    'latency-ms': float(20, 0, 2_000),
    seconds: float(1, 0.1, 600),
    only: listOf('warm', 'herd', 'fleet', 'wake', 'storm', 'hot', 'http', 'memory'),
    'http-seconds': int(3, 1, 600),
    'memory-rounds': int(1, 1, 9),
    valkey: valkeyOption(),
  },
  { jsonFileOnly: true },
);
const { rounds, valkey } = args;
const latencyMs = args['latency-ms'];
const only = new Set(args.only);
// Every section needs the server: one line and exit 2 when it does not answer.
await setUp(
  'bench:peers',
  connectAdmin(valkey).then((admin) => admin.disconnect()),
);
/** The built file of `bench/<name>.ts`. */
const built = (name: string) => fileURLToPath(new URL(`./${name}.js`, import.meta.url));
const WORKER = built('peers-worker');
const report: Record<string, unknown> = {};
const out: string[] = [];

const print = (title: string, rows: Array<Array<string | number>>, header?: string[]) => {
  const text = `${title}\n${columns(rows, header)}\n`;
  out.push(text);
  process.stdout.write(`${text}\n`);
};
const fmt = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
const tagOf = (what: string) => `pb-${what}-${randomBytes(4).toString('hex')}`;
type Policy = Record<string, unknown>;

/** Issue 22's rows, in the table's order: the section that measures each, the row, its target. */
const ROWS = [
  ['fleet', 'fleet herd 6 × 200: source reads; p99 − loader', '1 read; ≤ acd'],
  ['herd', 'herd 200, fresh process: p99 − loader', '≤ acd'],
  ['http', 'HTTP L1 hit ÷ bare fastify, req/s', '≥ 0.95'],
  [
    'storm',
    'cold storm 4 × 4000, Zipf 1.2 over 1000 keys: reads ÷ distinct; p99',
    '1.000; ≤ 1.2 × acd',
  ],
  [
    'memory',
    'L1 64 MiB, 400 k ids: heap after GC; RSS after GC and at its peak (÷ maxBytes, 64 and 256 readers)',
    '≤ 1.25 ×; ≤ 2 ×, ≤ 2 ×',
  ],
  ['warm', 'warm Table.get ÷ awaited lru-cache get', '≥ 0.9'],
  ['hot', 'hot key 20 000 readers: p99 − loader, none shed', '≤ 1.5 × acd'],
] as const;
/** Each row's figure as this run measured it and whether its target is met, by section. */
const judged: Record<string, { figure: string; met: boolean }> = {};
/** Keeps section `name`'s row of issue 22's table; returns `met`. */
const judge = (name: string, figure: string, met: boolean) => {
  judged[name] = { figure, met };
  return met;
};

/** A round of fresh processes (one per setup), all firing at one moment. */
const fire = (setups: Setup[]) => runWorkers<Result>(WORKER, setups, together(200, 120_000));
/** A fresh process of `peer` for `shape`. */
const setupOf = (peer: PeerName, shape: Setup['shape'], tag: string, policy?: Policy): Setup => ({
  ...{ kind: 'setup', peer, valkey, tag, latencyMs, shape, policy },
});
/** `readers` cold readers of `id` at once. */
const herdOf = (id: string, readers = 200) => ({ kind: 'herd' as const, id, readers });
/** The herd's p99 less the loader's own time (its median over the round's source reads). */
const overhead = (results: Result[]) => {
  const loader = results.flatMap((r) => r.loaderMs);
  const latencies = results.flatMap((r) => r.latenciesMs);
  const p99 = percentile(latencies, 99);
  return { p99, over: p99 - (loader.length === 0 ? latencyMs : median(loader)) };
};
const sourceReads = (results: Result[]) => sum(results, (r) => r.loaderMs.length);

/** A cold section's figures of one peer, over its rounds. */
type ColdFigures = Record<'reads' | 'failed' | 'p99' | 'overhead' | 'worstOverhead', number>;

/** `n` cold rounds of every peer of `peers`, interleaved, in fresh processes; medians over rounds. */
async function coldRounds(
  what: string,
  shapes: (round: number) => Setup['shape'][],
  { policy, n = rounds, peers = PEERS }: { policy?: Policy; n?: number; peers?: PeerName[] } = {},
): Promise<Record<PeerName, ColdFigures>> {
  const per = new Map(peers.map((p) => [p, [] as Result[][]]));
  for (let round = 0; round < n; round++) {
    for (const peer of peers) {
      const [tag, mine] = [tagOf(what), peer === 'echostore' ? policy : undefined];
      per.get(peer)?.push(await fire(shapes(round).map((s) => setupOf(peer, s, tag, mine))));
    }
  }
  const figures = (rs: Result[][]): ColdFigures => {
    const each = rs.map(overhead);
    const over = each.map((o) => o.over);
    return {
      ...{ reads: median(rs.map(sourceReads)), failed: sum(rs.flat(), (r) => r.failed) },
      ...{ p99: median(each.map((o) => o.p99)), overhead: median(over) },
      worstOverhead: Math.max(...over),
    };
  };
  const all = Object.fromEntries([...per].map(([p, rs]) => [p, figures(rs)]));
  return all as Record<PeerName, ColdFigures>;
}

async function warm(): Promise<void> {
  const KEYS = 1_000;
  const ids = Array.from({ length: KEYS }, (_, i) => String(i + 1));
  const loader = sleepLoader(0);
  // The floor, twice: lru-cache as the row's target names it (no TTL), and with a TTL as long
  // as the peers' (300 s), since an L1 row has lifetimes too and every hit checks them.
  const lru = new LRUCache<string, object>({ max: KEYS * 2 });
  const lruTtl = new LRUCache<string, object>({ max: KEYS * 2, ttl: 300_000 });
  for (const id of ids) {
    lru.set(id, await loader.load(id));
    lruTtl.set(id, await loader.load(id));
  }
  // echostore's L1 rows outlive the run (by default 30 s); async-cache-dedupe on its memory storage.
  const { load } = loader;
  const policy = { l1: { ttlMs: 3_600_000 } };
  const peers = {} as Record<PeerName, Peer>;
  for (const p of PEERS) {
    peers[p] = await makePeer(p, { valkey, tag: tagOf('warm'), load, policy, storage: 'memory' });
    for (const id of ids) await peers[p].get(id);
  }
  const es = peers.echostore;
  const nth = (i: number) => ids[i % KEYS] as string;
  const ops: Record<string, (i: number) => Promise<unknown>> = {
    'lru-cache get, awaited': async (i) => lru.get(nth(i)),
    'lru-cache (ttl 300 s) get, awaited': async (i) => lruTtl.get(nth(i)),
    'echostore Table.get': (i) => es.get(nth(i)),
    'echostore Table.get + .value': async (i) => ((await es.get(nth(i))) as { value: 0 }).value,
    'async-cache-dedupe (memory storage)': (i) => peers['async-cache-dedupe'].get(nth(i)),
    'bentocache (L1 + L2)': (i) => peers.bentocache.get(nth(i)),
  };
  for (const op of Object.values(ops)) await opsPerCpuSecond(200, op);
  const samples = Object.fromEntries(Object.keys(ops).map((k) => [k, [] as number[]]));
  for (let r = 0; r < Math.max(3, rounds); r++) {
    for (const [name, op] of Object.entries(ops))
      samples[name]?.push(await opsPerCpuSecond(args.seconds * 1000, op));
  }
  for (const p of Object.values(peers)) await p.close();
  // Each round's ratio to the floor measured in that round, then the median: drift on a shared
  // machine moves a round's figures together.
  const ratiosTo = (name: string, floor: string) =>
    (samples[name] as number[]).map((x, r) => x / ((samples[floor] as number[])[r] as number));
  const [plain, withTtl] = ['lru-cache get, awaited', 'lru-cache (ttl 300 s) get, awaited'];
  const rows = Object.entries(samples).map(([name, xs]) => [
    ...[name, `${(median(xs) / 1e6).toFixed(2)} M`],
    ...[fmt(median(ratiosTo(name, plain)), 2), fmt(median(ratiosTo(name, withTtl)), 2)],
  ]);
  const each = ratiosTo('echostore Table.get', plain);
  const [ratio, ratioTtl] = [median(each), median(ratiosTo('echostore Table.get', withTtl))];
  const opsPerSecond = Object.fromEntries(Object.entries(samples).map(([k, x]) => [k, median(x)]));
  report.warm = { opsPerSecond, ratio, ratioTtl, rounds: each };
  const figure = `${fmt(ratio, 2)} (÷ lru-cache with TTL: ${fmt(ratioTtl, 2)})`;
  const ok = judge('warm', figure, ratio >= 0.9);
  print(
    `warm get, ${KEYS} keys, ${args.seconds} s × ${Math.max(3, rounds)} rounds (median of each round's ratio; Table.get each round: ${each.map((x) => fmt(x, 2)).join(', ')})`,
    [...rows, ['target: Table.get ≥ 0.9 × awaited lru-cache get', '', fmt(ratio, 2), met(ok)]],
    ['', 'ops per CPU-second', '÷ lru awaited', '÷ lru (TTL) awaited'],
  );
}

/** A cold section's table: each peer's figures, then the target's row with `cells` and its verdict. */
function coldTable(
  title: string,
  figures: Record<PeerName, ColdFigures>,
  target: string,
  ok: boolean,
  [reads, failed]: Array<string | number> = ['', ''],
): void {
  const es = figures.echostore;
  const rows = PEERS.map((p) => {
    const f = figures[p];
    const ratio = p === 'echostore' ? '' : fmt(es.overhead / f.overhead, 2);
    return [p, f.reads, f.failed, fmt(f.p99), fmt(f.overhead), fmt(f.worstOverhead), ratio];
  });
  const last = [`target: ${target}`, reads, failed, '', fmt(es.overhead), '', met(ok)];
  print(
    title,
    [...rows, last as Array<string | number>],
    [
      ...['peer', 'source reads', 'failed', 'p99 ms', 'p99 − loader ms'],
      ...['worst round: p99 − loader ms', 'echostore ÷ peer, p99 − loader'],
    ],
  );
}

async function herd(): Promise<void> {
  const f = await coldRounds('herd', (r) => [herdOf(`h${r}`)]);
  report.herd = f;
  const [es, acd] = [f.echostore, f['async-cache-dedupe']];
  const figure = `${fmt(es.overhead)} ms (acd ${fmt(acd.overhead)} ms)`;
  const ok = judge('herd', figure, es.overhead <= acd.overhead);
  const title = `herd: 200 cold readers of one id, fresh process, ${rounds} rounds (median)`;
  coldTable(title, f, "p99 − loader ≤ async-cache-dedupe's", ok);
}

async function fleet(): Promise<void> {
  const f = await coldRounds('fleet', (r) => Array.from({ length: 6 }, () => herdOf(`f${r}`)));
  report.fleet = f;
  const [es, acd] = [f.echostore, f['async-cache-dedupe']];
  const figure = `${es.reads} read(s); ${fmt(es.overhead)} ms (acd ${acd.reads} reads, ${fmt(acd.overhead)} ms)`;
  const ok = judge('fleet', figure, es.overhead <= acd.overhead && es.reads === 1);
  const title = `fleet herd: 6 processes × 200 cold readers of one id, ${rounds} rounds (median)`;
  coldTable(title, f, "1 source read, p99 − loader ≤ async-cache-dedupe's", ok, [es.reads, '']);
}

/** Commands the scripts run (INFO commandstats counts them too): not round trips of their own. */
const IN_SCRIPTS = new Set(['time', 'get', 'set', 'pttl', 'del', 'publish', 'pexpire']);
/** The bench's own commands, a worker's goodbye, and the subscriber's heartbeat (not the read's). */
const NOT_COUNTED = new Set(['config|resetstat', 'info', 'quit', 'ping']);

/**
 * Round trips in `INFO commandstats` (`info`): `scripts` is every EVALSHA and EVAL less the
 * store's health probes (a script that writes, reads and deletes one hash field, each probe
 * one `HDEL`), `other` every other command a client sent (an epochs `HGETALL`).
 */
function roundTrips(info: string): { scripts: number; other: number } {
  const calls = Object.fromEntries(
    [...info.matchAll(/^cmdstat_([\w|-]+):calls=(\d+)/gm)].map((m) => [m[1], Number(m[2])]),
  ) as Record<string, number>;
  const probes = calls.hdel ?? 0;
  const probeInner = new Set(['hset', 'hget', 'hdel', 'hgetall', 'evalsha', 'eval']);
  const other =
    Object.entries(calls)
      .filter(([c]) => !IN_SCRIPTS.has(c) && !NOT_COUNTED.has(c) && !probeInner.has(c))
      .reduce((n, [, x]) => n + x, 0) + Math.max(0, (calls.hgetall ?? 0) - probes);
  return { scripts: (calls.evalsha ?? 0) + (calls.eval ?? 0) - probes, other };
}

/**
 * When each `fill` event reached a subscriber of the bench's own (epoch ms), by table and id:
 * the moment the waiters' subscribers get it too. `at` is NaN for a fill not seen.
 */
async function watchFills(url: string) {
  const sub = new Redis(url, { maxRetriesPerRequest: 0 });
  const seen = new Map<string, number>();
  sub.on('pmessage', (_pattern: string, channel: string, message: string) => {
    const receivedAt = performance.timeOrigin + performance.now();
    let event: { k?: string; id?: string };
    try {
      event = JSON.parse(message) as { k?: string; id?: string };
    } catch {
      return; // not an event (the store's start-up probe of the channel)
    }
    const key = `${channel.slice('ecc:events:'.length)}\u0000${event.id}`;
    if (event.k === 'fill' && !seen.has(key)) seen.set(key, receivedAt);
  });
  await sub.psubscribe('ecc:events:*');
  return {
    at: (table: string, id: string) => seen.get(`${table}\u0000${id}`) ?? Number.NaN,
    close: () => sub.disconnect(),
  };
}

/**
 * The fleet cold read, echostore alone, on a redis-server of the bench's own (`CONFIG RESETSTAT`
 * touches nobody else's counters): the fill's event carrying the value (the default) against its
 * version only (`fillEventMaxBytes: 0`), interleaved round by round. Counts the round trips of
 * the holder (a round of one process) and of a waiter (a round of six, less the holder's, ÷ 5),
 * and times each waiter's answers from the fill's event reaching the bench's own subscriber.
 */
async function wake(): Promise<void> {
  const PAIR_IDS = 40;
  const server = await spawnValkey();
  const admin = new Redis(server.url, { maxRetriesPerRequest: 0 });
  const fills = await watchFills(server.url);
  const variant = (name: string, policy: Policy) => ({
    ...{ name, policy, other: 0, holder: [] as number[], waiter: [] as number[] },
    ...{ reads: [] as number[], over: [] as number[], firstMs: [] as number[] },
    ...{ everyMs: [] as number[], pairMs: [] as number[] },
  });
  const variants = [
    variant('fill event with the value (default)', {}),
    variant('fill event with the version only (before)', { fillEventMaxBytes: 0 }),
  ];
  // Each process reads after the store's start-up commands have landed (`settleMs`).
  const setup = (tag: string, policy: Policy, shape: Setup['shape']): Setup => ({
    ...setupOf('echostore', shape, tag, policy),
    ...{ valkey: server.url, settleMs: 500 },
  });
  const measured = async (setups: Setup[]) => {
    const go = async () => {
      await admin.config('RESETSTAT');
      return together(200, 120_000)();
    };
    const results = await runWorkers<Result>(WORKER, setups, go);
    return { results, ...roundTrips((await admin.info('commandstats')) as string) };
  };
  try {
    // Loads the scripts into the server once (a first EVALSHA answered NOSCRIPT is one more trip).
    await measured([setup(tagOf('wake'), {}, herdOf('warm'))]);
    for (let round = 0; round < rounds; round++) {
      for (const f of variants) {
        const tag = tagOf('wake');
        const alone = await measured([setup(tag, f.policy, herdOf(`a${round}`))]);
        const six = Array.from({ length: 6 }, () => setup(tag, f.policy, herdOf(`w${round}`)));
        const { results, ...fleet } = await measured(six);
        f.holder.push(alone.scripts);
        f.waiter.push((fleet.scripts - alone.scripts) / 5);
        f.other += alone.other + fleet.other;
        f.reads.push(sourceReads(results));
        f.over.push(overhead(results).over);
        const filledAt = fills.at(tag, `w${round}`);
        for (const r of results) {
          if (r.loaderMs.length === 0) f.everyMs.push(...r.answeredAtMs.map((t) => t - filledAt));
          // The waiter's flight woke at its first answer; the rest is handing it to 200 callers.
          f.firstMs.push(...r.wokeAtMs.map((t) => t - filledAt));
        }
        // Two processes, one reader each, 40 ids 50 ms apart: the wake-up without a herd's CPU.
        const ids = Array.from({ length: PAIR_IDS }, (_, k) => `p${round}-${k}`);
        const paced = { kind: 'paced' as const, ids, everyMs: 50 };
        const pair = await fire([0, 1].map(() => setup(tag, f.policy, paced)));
        for (const r of pair)
          f.pairMs.push(...r.wokeAtMs.map((t, k) => t - fills.at(tag, r.wokeIds[k] ?? '')));
      }
    }
  } finally {
    fills.close();
    admin.disconnect();
    await server.stop();
  }
  const [p50, p99] = [(xs: number[]) => percentile(xs, 50), (xs: number[]) => percentile(xs, 99)];
  const figures = variants.map((f) => ({
    ...{ name: f.name, reads: median(f.reads), holderTrips: median(f.holder) },
    ...{ waiterTrips: median(f.waiter), otherCommands: f.other },
    ...{ firstAnswerP50Ms: p50(f.firstMs), firstAnswerP99Ms: p99(f.firstMs) },
    ...{ wakeP50Ms: p50(f.everyMs), wakeP99Ms: p99(f.everyMs), overheadMs: median(f.over) },
    ...{ pairWakeP50Ms: p50(f.pairMs), pairWakeP99Ms: p99(f.pairMs) },
  }));
  report.fleetWake = figures;
  print(
    `fleet cold read, echostore: 6 processes × 200 readers of one id, own redis-server, ${rounds} rounds (median; wake: from the fill event's arrival at the bench's own subscriber to a waiter process's first answer, and to each of its answers; then 2 processes × 1 reader, ${PAIR_IDS} ids per round; load average ${loadavg()[0]?.toFixed(1)})`,
    figures.map((x) => [
      ...[x.name, x.reads, fmt(x.holderTrips), fmt(x.waiterTrips), x.otherCommands],
      ...[fmt(x.firstAnswerP50Ms, 2), fmt(x.firstAnswerP99Ms, 2)],
      ...[fmt(x.wakeP50Ms, 2), fmt(x.wakeP99Ms, 2), fmt(x.overheadMs)],
      `${fmt(x.pairWakeP50Ms, 2)} / ${fmt(x.pairWakeP99Ms, 2)}`,
    ]),
    [
      ...['', 'source reads', 'holder round trips', 'waiter round trips'],
      ...['other commands, all rounds', 'first answer p50 ms', 'first answer p99 ms'],
      ...['every answer p50 ms', 'every answer p99 ms', 'p99 − loader ms'],
      '2 × 1 reader: wake p50 / p99 ms',
    ],
  );
}

async function storm(): Promise<void> {
  const [PROCS, READS, KEYS] = [4, 4_000, 1_000];
  const sequences = Array.from({ length: PROCS }, (_, i) =>
    Array.from({ length: READS }, zipfSampler(KEYS, 1.2, 1_000 + i)).map((k) => k - 1),
  );
  const distinct = new Set(sequences.flat()).size;
  const shapes = () =>
    sequences.map((seq) => ({
      ...{ kind: 'storm' as const, ids: seq.map((k) => `k${k}`) },
      concurrency: 128,
    }));
  const n = Math.max(1, Math.ceil(rounds / 2));
  const f = await coldRounds('storm', shapes, { n });
  // What growing the load limit buys here: echostore once more with it fixed at 16 (a ceiling of
  // 16, where it starts), as it was before the limit could grow past its start.
  const fixedAt16 = { policy: { maxConcurrentLoads: 16 }, n, peers: ['echostore' as const] };
  const fixed = (await coldRounds('storm16', shapes, fixedAt16)).echostore;
  report.storm = { distinct, ...f, echostoreFixed16: fixed };
  const [es, acd] = [f.echostore, f['async-cache-dedupe']];
  const figure = `${fmt(es.reads / distinct, 3)}; ${fmt(es.p99)} ms vs acd ${fmt(acd.p99)} ms: ${fmt(es.p99 / acd.p99, 2)} ×`;
  const ok = judge('storm', figure, es.reads === distinct && es.p99 <= 1.2 * acd.p99);
  const row = (name: string, x: ColdFigures, ratio = fmt(es.p99 / x.p99, 2)) => [
    ...[name, fmt(x.reads / distinct, 2), x.failed, fmt(x.p99), ratio],
  ];
  print(
    `cold storm: ${PROCS} processes × ${READS} reads, 128 at a time, Zipf 1.2 over ${KEYS} keys (${distinct} distinct read)`,
    [
      ...PEERS.map((p) => row(p, f[p], p === 'echostore' ? '' : undefined)),
      row('echostore, maxConcurrentLoads 16 (the limit fixed at its start)', fixed),
      [
        ...['target: reads ÷ distinct = 1.00, p99 ≤ 1.2 × async-cache-dedupe'],
        ...[fmt(es.reads / distinct, 2), '', fmt(es.p99), met(ok)],
      ],
    ],
    ['peer', 'reads ÷ distinct', 'failed', 'p99 ms', 'echostore ÷ peer'],
  );
}

async function hot(): Promise<void> {
  for (const readers of [2_000, 20_000]) {
    const f = await coldRounds(`hot${readers}`, (r) => [herdOf(`x${r}`, readers)]);
    report[`hot${readers}`] = f;
    const [es, acd] = [f.echostore, f['async-cache-dedupe']];
    const ok = es.failed === 0 && es.overhead <= 1.5 * acd.overhead;
    // The 20 000 readers' figures are issue 22's row.
    const figure = `${fmt(es.overhead)} ms, ${fmt(es.overhead / acd.overhead, 2)} × acd (${fmt(acd.overhead)} ms); ${es.failed} failed`;
    if (readers === 20_000) judge('hot', figure, ok);
    const title = `hot key: ${readers} concurrent readers of one cold id, one process, ${rounds} rounds`;
    coldTable(title, f, 'p99 − loader ≤ 1.5 × async-cache-dedupe, none shed', ok, ['', es.failed]);
  }
}

/** Another bench (`node <argv>`) in a child process, its output shown as it comes: its `--json` figures. */
async function benchFigures<T>(argv: string[]): Promise<T> {
  const file = join(tmpdir(), `bench-peers-${process.pid}-${randomBytes(4).toString('hex')}.json`);
  try {
    out.push(await runNode([...argv, '--valkey', valkey, '--json', file], true));
    process.stdout.write('\n');
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } finally {
    rmSync(file, { force: true });
  }
}

/** The HTTP L1 hit against a bare fastify route: `bench.ts --only http`. */
async function http(): Promise<void> {
  const argv = [built('bench'), '--only', 'http', '--seconds', String(args['http-seconds'])];
  const h = (await benchFigures<{ http: HttpFigures }>(argv)).http;
  report.http = h;
  const figure = `${fmt(h.ratio, 3)} (${h.ratios.map((r) => fmt(r, 2)).join(', ')}); ${h.errors} errors; ÷ a bare route sending the same headers ${fmt(h.ratioSameHeaders, 3)}`;
  judge('http', figure, h.ratio >= 0.95 && h.errors === 0);
}

/**
 * Memory: `memory.ts` in a child process, under `npm start`'s V8 flags only (`--no-defaults`:
 * what the service runs with); of its stream figures (÷ maxBytes) the worse of 64 and 256 readers
 * counts.
 */
async function memory(): Promise<void> {
  const argv = ['--expose-gc', built('memory'), '--no-defaults'];
  type Stream = { heap: number; rss: number; peak: number };
  const more = ['--rounds', String(args['memory-rounds'])];
  const { streams } = await benchFigures<{ streams: Stream[] }>([...argv, ...more]);
  const worst = (k: keyof Stream) => Math.max(...streams.map((x) => x[k]));
  const m = { settings: streams, heap: worst('heap'), rss: worst('rss'), peak: worst('peak') };
  report.memory = m;
  const figure = `${fmt(m.heap, 2)} ×; ${fmt(m.rss, 2)} × (peak ${fmt(m.peak, 2)} ×)`;
  judge('memory', figure, m.heap <= 1.25 && m.rss <= 2 && m.peak <= 2);
}

const header = [
  `bench:peers ${new Date().toISOString()}`,
  machineLine(),
  `peers: echostore (this tree), ${versionOf('async-cache-dedupe')}, ${versionOf('bentocache')}`,
  `loader: sleep ${latencyMs} ms; redis: ${valkey}`,
].join('\n');
out.push(header);
process.stdout.write(`${header}\n\n`);
/** Sections that threw (a worker that never started, a child that failed): name → message. */
const failed: Record<string, string> = {};
/** Runs a section `--only` selects (`wake` also with `fleet`); a failure is printed and kept, and the run goes on. */
for (const [name, run] of Object.entries({ warm, herd, fleet, wake, storm, hot, http, memory })) {
  if (!only.has(name) && !(name === 'wake' && only.has('fleet'))) continue;
  try {
    await run();
  } catch (err) {
    failed[name] = (err as Error).message;
    print(`${name}: failed`, [[(err as Error).message]]);
  }
}
const table = ROWS.map(([name, row, target]) => {
  const why = failed[name];
  const figure = why === undefined ? judged[name] : { figure: `failed: ${why}`, met: false };
  return { row, target, ...(figure ?? { figure: 'not measured in this run', met: undefined }) };
});
report.summary = table;
report.failed = failed;
print(
  'summary: the speed and memory targets (issue 22 of the tracker), every figure from this run (acd: async-cache-dedupe)',
  table.map((r) => [r.row, r.target, r.figure, r.met === undefined ? '—' : met(r.met)]),
  ['row', 'target', 'this run', 'verdict'],
);
const json = { header, report, text: out.join('\n') };
if (args.json !== undefined) writeFileSync(args.json, `${JSON.stringify(json, null, 2)}\n`);
process.exit(0);
