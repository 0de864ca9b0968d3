/**
 * echostore beside async-cache-dedupe and bentocache, one run, one machine, the same loader
 * and Redis: warm gets, herds, a fleet herd, a storm and a hot key, each cold figure in fresh
 * processes, peers interleaved round by round; then the HTTP L1 hit (`bench.ts --only http`) and
 * memory (`memory.ts`), each in a child process; then issue 22's table, every row's verdict
 * computed from this run's figures. Prints figures and targets; asserts nothing. Usage:
 * drills/README.md#benchpeers.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LRUCache } from 'lru-cache';
import { drillArgs, float, int, text, valkeyOption } from '../drills/lib/cli.js';
import { columns, machineLine, median, opsPerCpuSecond, percentile } from '../drills/lib/report.js';
import { runNode, runWorkers, together } from '../drills/lib/workers.js';
import { zipfSampler } from '../drills/lib/zipf.js';
import type { HttpFigures } from './bench.js';
import { fleetWake } from './fleet-wake.js';
import { makePeer, PEERS, type PeerName, sleepLoader, versionOf } from './peers-lib.js';
import type { Result, Setup } from './peers-worker.js';

const args = drillArgs({
  rounds: int(3, 1, 100),
  'latency-ms': float(20, 0, 2_000),
  seconds: float(1, 0.1, 600),
  // `wake` alone: the fleet cold read's round trips and waiter wake-up (`fleet` prints it too).
  only: text('warm,herd,fleet,storm,hot,http,memory'),
  // The `http` section: autocannon seconds per round (`bench --seconds`).
  'http-seconds': int(3, 1, 600),
  // The `memory` section: rounds of `bench:memory` (each round streams four fresh processes).
  'memory-rounds': int(1, 1, 9),
  valkey: valkeyOption(),
});
const { rounds, valkey } = args;
const latencyMs = args['latency-ms'];
const only = new Set(args.only.split(','));
const WORKER = fileURLToPath(new URL('./peers-worker.js', import.meta.url));
const report: Record<string, unknown> = {};
const out: string[] = [];

const print = (title: string, rows: Array<Array<string | number>>, header?: string[]) => {
  const text = `${title}\n${columns(rows, header)}\n`;
  out.push(text);
  process.stdout.write(`${text}\n`);
};
const fmt = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
const verdict = (ok: boolean) => (ok ? 'met' : 'GAP');
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
  const results = await runWorkers<Result>(WORKER, setups, together(200, 120_000));
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
  // The floor, twice: lru-cache as the row's target names it (no TTL), and with a TTL as long
  // as the peers' (300 s), since an L1 row has lifetimes too and every hit checks them.
  const lru = new LRUCache<string, object>({ max: KEYS * 2 });
  const lruTtl = new LRUCache<string, object>({ max: KEYS * 2, ttl: 300_000 });
  for (const id of ids) {
    lru.set(id, await loader.load(id));
    lruTtl.set(id, await loader.load(id));
  }
  const peers = {
    // L1 rows outlive the run (by default they live 30 s, shorter than a run of `--seconds 2`).
    echostore: await makePeer('echostore', {
      valkey,
      tag: tagOf('warm'),
      load: loader.load,
      policy: { l1: { ttlMs: 3_600_000 } },
    }),
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
    'lru-cache (ttl 300 s) get, awaited': async (i) => lruTtl.get(ids[i % KEYS] as string),
    'echostore Table.get': (i) => es.get(ids[i % KEYS] as string),
    'echostore Table.get + .value': async (i) =>
      ((await es.get(ids[i % KEYS] as string)) as { value: unknown }).value,
    'async-cache-dedupe (memory storage)': (i) =>
      peers['async-cache-dedupe'].get(ids[i % KEYS] as string),
    'bentocache (L1 + L2)': (i) => peers.bentocache.get(ids[i % KEYS] as string),
  };
  const ms = args.seconds * 1000;
  for (const op of Object.values(ops)) await opsPerCpuSecond(200, op);
  const samples: Record<string, number[]> = Object.fromEntries(
    Object.keys(ops).map((k) => [k, []]),
  );
  for (let r = 0; r < Math.max(3, rounds); r++) {
    for (const [name, op] of Object.entries(ops))
      samples[name]?.push(await opsPerCpuSecond(ms, op));
  }
  for (const p of Object.values(peers)) await p.close();
  // Each round's ratio to the floor measured in that round, then the median: drift on a shared
  // machine moves a round's figures together.
  const ratiosTo = (name: string, floor: string) =>
    (samples[name] as number[]).map((x, r) => x / ((samples[floor] as number[])[r] as number));
  const plain = 'lru-cache get, awaited';
  const withTtl = 'lru-cache (ttl 300 s) get, awaited';
  const rows = Object.entries(samples).map(([name, xs]) => [
    name,
    `${(median(xs) / 1e6).toFixed(2)} M`,
    fmt(median(ratiosTo(name, plain)), 2),
    fmt(median(ratiosTo(name, withTtl)), 2),
  ]);
  const each = ratiosTo('echostore Table.get', plain);
  const es2 = median(each);
  const es2Ttl = median(ratiosTo('echostore Table.get', withTtl));
  report.warm = {
    opsPerSecond: Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, median(xs)])),
    ratio: es2,
    ratioTtl: es2Ttl,
    rounds: each,
  };
  print(
    `warm get, ${KEYS} keys, ${args.seconds} s × ${Math.max(3, rounds)} rounds (median of each round's ratio; Table.get each round: ${each.map((x) => fmt(x, 2)).join(', ')})`,
    [
      ...rows,
      ['target: Table.get ≥ 0.9 × awaited lru-cache get', '', fmt(es2, 2), verdict(es2 >= 0.9)],
    ],
    ['', 'ops per CPU-second', '÷ lru awaited', '÷ lru (TTL) awaited'],
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
      'worst round: p99 − loader ms',
      'echostore ÷ peer, p99 − loader',
    ],
  );
}

async function herd(): Promise<void> {
  const f = await coldRounds('herd', (r) => [{ kind: 'herd', id: `h${r}`, readers: 200 }]);
  report.herd = f;
  const es = f.echostore;
  coldTable(`herd: 200 cold readers of one id, fresh process, ${rounds} rounds (median)`, f, [
    [
      "target: p99 − loader ≤ async-cache-dedupe's",
      '',
      '',
      '',
      fmt(es.overhead),
      '',
      verdict(es.overhead <= f['async-cache-dedupe'].overhead),
    ],
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
      "target: 1 source read, p99 − loader ≤ async-cache-dedupe's",
      es.reads,
      '',
      '',
      fmt(es.overhead),
      '',
      verdict(es.overhead <= f['async-cache-dedupe'].overhead && es.reads === 1),
    ],
  ]);
  if (!only.has('wake')) await wake();
}

/** The fleet cold read's round trips and waiter wake-up (`fleet-wake.ts`). */
async function wake(): Promise<void> {
  report.fleetWake = await fleetWake({ rounds, latencyMs, worker: WORKER, tagOf, print });
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

/** The built file of `bench/<name>.ts`. */
const built = (name: string) => fileURLToPath(new URL(`./${name}.js`, import.meta.url));

/** Another bench (`node <argv>`) in a child process, its output shown as it comes: its `--json` figures. */
async function benchFigures<T>(argv: string[]): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-peers-'));
  const file = join(dir, 'figures.json');
  try {
    out.push(await runNode([...argv, '--valkey', valkey, '--json', file], true));
    process.stdout.write('\n');
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The HTTP L1 hit against a bare fastify route: `bench.ts --only http`. */
async function http(): Promise<void> {
  const argv = [built('bench'), '--only', 'http', '--seconds', String(args['http-seconds'])];
  report.http = (await benchFigures<{ http: HttpFigures }>(argv)).http;
}

/** What the `memory` section read from `bench:memory`'s stream figures (ratios to maxBytes). */
type Stream = { heap: number; rss: number; peak: number };

/**
 * Memory: `memory.ts` in a child process, under `npm start`'s V8 flags only (`--no-defaults`:
 * what the service runs with); of its stream figures (÷ maxBytes) the worse of 64 and 256 readers
 * counts.
 */
async function memory(): Promise<void> {
  const argv = ['--expose-gc', built('memory'), '--no-defaults'];
  const more = ['--rounds', String(args['memory-rounds'])];
  const { streams } = await benchFigures<{ streams: Stream[] }>([...argv, ...more]);
  const worst = (k: keyof Stream) => Math.max(...streams.map((x) => x[k]));
  report.memory = {
    settings: streams,
    heap: worst('heap'),
    rss: worst('rss'),
    peak: worst('peak'),
  };
}

/** One row of issue 22's table: the figure this run printed, the target, the verdict. */
interface SummaryRow {
  row: string;
  target: string;
  figure: string;
  /** undefined: the section did not run (`--only`) or printed nothing readable. */
  met: boolean | undefined;
}

/** Issue 22's table from this run's figures (`report`); a row whose section did not run says so. */
function summary(): SummaryRow[] {
  const cold = (key: string) => report[key] as Record<PeerName, ColdFigures> | undefined;
  const rows: SummaryRow[] = [];
  const add = (
    row: string,
    target: string,
    name: string,
    f: () => [string, boolean] | undefined,
  ) => {
    const got = f();
    const why = failed[name];
    if (why !== undefined) rows.push({ row, target, figure: `failed: ${why}`, met: false });
    else if (got === undefined) {
      rows.push({ row, target, figure: 'not measured in this run', met: undefined });
    } else rows.push({ row, target, figure: got[0], met: got[1] });
  };
  const acdOf = (f: Record<PeerName, ColdFigures>) => f['async-cache-dedupe'];
  add('fleet herd 6 × 200: source reads; p99 − loader', '1 read; ≤ acd', 'fleet', () => {
    const f = cold('fleet');
    if (f === undefined) return undefined;
    const es = f.echostore;
    return [
      `${es.reads} read(s); ${fmt(es.overhead)} ms (acd ${acdOf(f).reads} reads, ${fmt(acdOf(f).overhead)} ms)`,
      es.reads === 1 && es.overhead <= acdOf(f).overhead,
    ];
  });
  add('herd 200, fresh process: p99 − loader', '≤ acd', 'herd', () => {
    const f = cold('herd');
    if (f === undefined) return undefined;
    const es = f.echostore;
    return [
      `${fmt(es.overhead)} ms (acd ${fmt(acdOf(f).overhead)} ms)`,
      es.overhead <= acdOf(f).overhead,
    ];
  });
  add('HTTP L1 hit ÷ bare fastify, req/s', '≥ 0.95', 'http', () => {
    const h = report.http as { ratio: number; ratios: number[]; errors: number } | undefined;
    if (h === undefined) return undefined;
    return [
      `${fmt(h.ratio, 3)} (${h.ratios.map((r) => fmt(r, 2)).join(', ')}); ${h.errors} errors`,
      h.ratio >= 0.95 && h.errors === 0,
    ];
  });
  add(
    'cold storm 4 × 4000, Zipf 1.2 over 1000 keys: reads ÷ distinct; p99',
    '1.000; ≤ 1.2 × acd',
    'storm',
    () => {
      const st = report.storm as ({ distinct: number } & Record<PeerName, ColdFigures>) | undefined;
      if (st === undefined) return undefined;
      const es = st.echostore;
      const acd = acdOf(st);
      return [
        `${fmt(es.reads / st.distinct, 3)}; ${fmt(es.p99)} ms vs acd ${fmt(acd.p99)} ms: ${fmt(es.p99 / acd.p99, 2)} ×`,
        es.reads === st.distinct && es.p99 <= 1.2 * acd.p99,
      ];
    },
  );
  add(
    'L1 64 MiB, 400 k ids: heap after GC; RSS after GC and at its peak (÷ maxBytes, 64 and 256 readers)',
    '≤ 1.25 ×; ≤ 2 ×, ≤ 2 ×',
    'memory',
    () => {
      const m = report.memory as Stream | undefined;
      if (m === undefined) return undefined;
      return [
        `${fmt(m.heap, 2)} ×; ${fmt(m.rss, 2)} × (peak ${fmt(m.peak, 2)} ×)`,
        m.heap <= 1.25 && m.rss <= 2 && m.peak <= 2,
      ];
    },
  );
  add('warm Table.get ÷ awaited lru-cache get', '≥ 0.9', 'warm', () => {
    const w = report.warm as { ratio: number; ratioTtl: number } | undefined;
    if (w === undefined) return undefined;
    return [`${fmt(w.ratio, 2)} (÷ lru-cache with TTL: ${fmt(w.ratioTtl, 2)})`, w.ratio >= 0.9];
  });
  add('hot key 20 000 readers: p99 − loader, none shed', '≤ 1.5 × acd', 'hot', () => {
    const f = cold('hot20000');
    if (f === undefined) return undefined;
    const es = f.echostore;
    return [
      `${fmt(es.overhead)} ms, ${fmt(es.overhead / acdOf(f).overhead, 2)} × acd (${fmt(acdOf(f).overhead)} ms); ${es.failed} failed`,
      es.failed === 0 && es.overhead <= 1.5 * acdOf(f).overhead,
    ];
  });
  return rows;
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
/** Runs a section `--only` selects; its failure is printed and kept, and the run goes on. */
async function section(name: string, run: () => Promise<void>): Promise<void> {
  if (!only.has(name)) return;
  try {
    await run();
  } catch (err) {
    failed[name] = (err as Error).message;
    print(`${name}: failed`, [[(err as Error).message]]);
  }
}
await section('warm', warm);
await section('herd', herd);
await section('fleet', fleet);
await section('wake', wake);
await section('storm', storm);
await section('hot', hot);
await section('http', http);
await section('memory', memory);
const table = summary();
report.summary = table;
report.failed = failed;
print(
  'summary: the speed and memory targets (issue 22 of the tracker), every figure from this run (acd: async-cache-dedupe)',
  table.map((r) => [r.row, r.target, r.figure, r.met === undefined ? '—' : verdict(r.met)]),
  ['row', 'target', 'this run', 'verdict'],
);
if (args.json !== undefined) {
  writeFileSync(
    args.json,
    `${JSON.stringify({ header, report, text: out.join('\n') }, null, 2)}\n`,
  );
}
process.exit(0);
