/**
 * Does `l1.maxBytes` bound real memory? Streams `--ids` distinct ids through a store, each stream
 * in a fresh process, per readers and V8 setting: heap and RSS growth ÷ maxBytes and what the
 * flags cost; then what a row takes against what L1 counts. `--check` exits 1 when the heap bound
 * or its flatness is missed. Usage: drills/README.md#benchmemory.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { setImmediate, setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { getHeapSpaceStatistics } from 'node:v8';
import { drillArgs, flag, int, text, valkeyOption } from '../drills/lib/cli.js';
import { bump, columns, machineLine, median, met, round, sum } from '../drills/lib/report.js';
import { connectAdmin, dropTable } from '../drills/lib/store.js';
import { runNode } from '../drills/lib/workers.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from '../src/l2/format.js';
import { L1 } from '../src/store/l1.js';
import { DEFAULT_POLICY } from '../src/store/policy.js';
import { createStore } from '../src/store/store.js';

/** The V8 flags of `npm start`: the words between `node` and the script, `ECHOSTORE_HEAP_MIB` at its default. */
function serviceV8Flags(startScript: string): string[] {
  const words = startScript.replace(/\$\{ECHOSTORE_HEAP_MIB:-(\d+)\}/g, '$1').split(/\s+/);
  const after = words.slice(words.indexOf('node') + 1);
  const end = after.findIndex((w) => !w.startsWith('--'));
  return after.slice(0, end);
}
const packageJson = JSON.parse(
  readFileSync(new URL('../../package.json', import.meta.url), 'utf8'),
) as { scripts: { start: string } };
const SERVICE_V8_FLAGS = serviceV8Flags(packageJson.scripts.start);

const args = drillArgs(
  {
    ids: int(400_000, 1),
    'max-mib': int(64, 1),
    lanes: int(0, 0, 10_000),
    try: text(''),
    'no-defaults': flag(),
    rounds: int(1, 1, 9),
    child: flag(),
    check: flag(),
    valkey: valkeyOption(),
  },
  { jsonFileOnly: true },
);
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  process.stderr.write('bench:memory needs node --expose-gc (npm run bench:memory passes it)\n');
  process.exit(2);
}
const MiB = 1024 * 1024;
const mib = (bytes: number) => (bytes / MiB).toFixed(1);

/** Time spent in the forced GCs of {@link settled}, ms (not the stream's cost). */
let forcedGcMs = 0;

/** Heap used after a full GC, RSS and ArrayBuffer contents; bytes. */
function settled() {
  const t0 = performance.now();
  gc?.();
  gc?.();
  forcedGcMs += performance.now() - t0;
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss, buffers: m.arrayBuffers };
}

/** A value whose JSON text is about `bytes` long, shaped like a catalogue row. */
function catalogueRow(id: string, bytes: number) {
  const base = { id, sku: `SKU-${id}`, name: 'Compact Mug', price_cents: 11113, stock: 461 };
  const pad = Math.max(0, bytes - JSON.stringify(base).length - 20);
  return { ...base, description: 'd'.repeat(pad) };
}

function envelopeOf(id: string, bytes: number, fromL2: boolean): Envelope {
  const value = catalogueRow(id, bytes);
  const env: Envelope = {
    value,
    json: JSON.stringify(value),
    version: 1_796_000_000_000_000 + Number(id),
    // On this process's clock, as rows really are (L1 keeps whole milliseconds).
    softExpiresAt: Math.floor(performance.now()) + 300_000,
    hardExpiresAt: Math.floor(performance.now()) + 360_000,
    deltaMs: 20,
    negative: false,
  };
  // An L2 value's JSON text is a slice of the stored envelope.
  return fromL2 ? (decodeEnvelope(encodeEnvelope(env)) as Envelope) : env;
}

function calibrate(): Array<Array<string | number>> {
  const unbounded = { ...DEFAULT_POLICY.l1, maxEntries: 1e7, maxBytes: 4 * 1024 * MiB, ttlMs: 1e9 };
  const rows: Array<Array<string | number>> = [];
  for (const [label, bytes, n] of [
    ['small (~100 B JSON)', 100, 100_000],
    ['medium (~600 B)', 600, 50_000],
    ['large (~6 KB)', 6_000, 5_000],
  ] as const) {
    for (const fromL2 of [false, true]) {
      const l1 = new L1(unbounded, 0);
      const before = settled();
      for (let i = 0; i < n; i++) {
        const id = String(1_000_000 + i);
        l1.set(id, envelopeOf(id, bytes, fromL2), performance.now());
      }
      const after = settled();
      const [heap, buffers] = [after.heap - before.heap, after.buffers - before.buffers];
      const perRow = [heap, buffers, l1.bytes].map((x) => Math.round(x / n));
      const taken = ((heap + buffers) / l1.bytes).toFixed(2);
      rows.push([`${label}, ${fromL2 ? 'from L2' : 'from the loader'}`, n, ...perRow, taken]);
      l1.clear();
    }
  }
  return rows;
}

/**
 * One stream of `--ids` ids through a store, `lanes` at a time: its growth from the start (after
 * warm-up), bytes: heap after GC, RSS after GC, RSS at its peak; heap and RSS after GC of the
 * samples taken once L1 was full; CPU time and the part V8's collectors took; what V8 held at the
 * start and at RSS's peak. A child process prints it as one line of JSON.
 */
async function stream(lanes: number) {
  const { ids, valkey } = args;
  const maxBytes = args['max-mib'] * MiB;
  const table = `bm-${randomBytes(4).toString('hex')}`;
  const store = await createStore({
    valkey,
    tables: {
      [table]: {
        load: (id) => catalogueRow(id, 150),
        ttlMs: 60_000,
        staleMs: 0,
        earlyRefreshBeta: 0,
        // Memory is measured here, not admission: no read is shed for queueing.
        maxQueueDelayMs: 60_000,
        l1: { maxBytes, maxEntries: 100_000_000, ttlMs: 600_000 },
      },
    },
  });
  const t = store.table(table);
  await t.get('warm-up');
  await t.invalidate('warm-up');
  const start = settled();
  const startHeld = held(start.rss);
  let [peakRss, peakHeld] = [start.rss, startHeld];
  let [gcMs, scavenges, markCompacts] = [0, 0, 0];
  const gcs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      gcMs += e.duration;
      const kind = (e as { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MINOR) scavenges++;
      else if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) markCompacts++;
    }
  });
  gcs.observe({ entryTypes: ['gc'] });
  const forcedBefore = forcedGcMs;
  const cpuBefore = process.cpuUsage();
  const full: Array<{ heap: number; rss: number }> = [];
  const failed: Record<string, number> = {};
  let [next, mark] = [0, ids / 10];
  const started = performance.now();
  const lane = async () => {
    while (next < ids) {
      const id = String(next++);
      await t.get(id).catch((err: { code?: string }) => bump(failed, err.code ?? 'other'));
    }
  };
  const sampler = (async () => {
    while (next < ids) {
      await sleep(20);
      const rss = process.memoryUsage.rss();
      if (rss > peakRss) {
        peakRss = rss;
        peakHeld = held(rss);
      }
      if (next >= mark) {
        mark += ids / 10;
        if (t.stats().l1_bytes >= 0.95 * maxBytes) full.push(settled());
      }
    }
  })();
  await Promise.all(Array.from({ length: lanes }, lane));
  await sampler;
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  // Entries reach the observer after the GC: let the last ones land.
  await setImmediate();
  gcs.disconnect();
  gcMs -= forcedGcMs - forcedBefore;
  const end = settled();
  const stats = t.stats();
  const redis = await connectAdmin(valkey);
  await store.close();
  await dropTable(redis, table).catch(() => 0);
  redis.disconnect();
  const [heapGrowth, rssGrowth] = [end.heap - start.heap, end.rss - start.rss];
  const cpuMs = (cpu.user + cpu.system) / 1000;
  return {
    ...{ seconds, failed, heapGrowth, rssGrowth, peakRssGrowth: peakRss - start.rss },
    ...{ peakRss, full, cpuMs, gcMs, scavenges, markCompacts, startHeld, peakHeld },
    ...{ rows: stats.l1_entries, countedBytes: stats.l1_bytes },
  };
}

/** What V8 holds for its young and old generations (old, code, large objects) and RSS besides, MiB. */
function held(rss: number): string {
  let [young, old] = [0, 0];
  for (const x of getHeapSpaceStatistics()) {
    if (x.space_name === 'new_space' || x.space_name === 'new_large_object_space')
      young += x.space_size;
    else old += x.space_size;
  }
  return `${mib(young)}/${mib(old)}/${mib(rss - young - old)}`;
}

/** Runs one stream in a fresh process with `v8Flags`: the calibration's garbage or another stream's pages would flatter RSS. */
async function streamIn(lanes: number, v8Flags: string[]): Promise<StreamReport> {
  const { ids, valkey } = args;
  const argv = ['--expose-gc', ...v8Flags, fileURLToPath(import.meta.url), '--child'];
  for (const [k, v] of Object.entries({ lanes, ids, 'max-mib': args['max-mib'], valkey }))
    argv.push(`--${k}`, String(v));
  return JSON.parse(await runNode(argv)) as StreamReport;
}

type StreamReport = Awaited<ReturnType<typeof stream>>;

/** Within ±10 % of their middle. */
const flat = (xs: number[]) =>
  xs.length < 2 || (Math.max(...xs) - Math.min(...xs)) / Math.max(...xs) <= 0.2;

async function main(): Promise<void> {
  if (args.child) {
    process.stdout.write(`${JSON.stringify(await stream(args.lanes))}\n`);
    process.exit(0);
  }
  const maxBytes = args['max-mib'] * MiB;
  process.stdout.write(`bench:memory ${new Date().toISOString()}\n${machineLine()}\n\n`);
  const settings = [
    ...(args['no-defaults'] ? [] : [{ label: 'V8 defaults', flags: [] as string[] }]),
    { label: `npm start: ${SERVICE_V8_FLAGS.join(' ')}`, flags: SERVICE_V8_FLAGS },
    ...args.try
      .split(';')
      .map((x) => x.trim())
      .filter((x) => x !== '')
      .map((x) => ({ label: x, flags: x.split(/\s+/) })),
  ];
  const laneCounts = args.lanes > 0 ? [args.lanes] : [64, 256];
  const cells = laneCounts.flatMap((lanes) =>
    settings.map((y) => ({ lanes, y, rs: [] as StreamReport[] })),
  );
  // Rounds outermost, settings alternating within a round: the machine's load drifts alike for all.
  for (let round = 0; round < args.rounds; round++)
    for (const c of cells) c.rs.push(await streamIn(c.lanes, c.y.flags));
  let heapHeld = true;
  /** `--json`: each setting's growth ÷ maxBytes, as printed (what `bench:peers` reads). */
  const streams: object[] = [];
  const table = cells.map(({ lanes, y, rs }) => {
    const ratio = (f: (r: StreamReport) => number) => median(rs.map(f)) / maxBytes;
    const perId = (f: (r: StreamReport) => number) =>
      Math.round(median(rs.map((r) => (1000 * f(r)) / args.ids)));
    const failed = sum(rs, (r) => sum(Object.values(r.failed), (n) => n));
    const flatOnceFull = (r: StreamReport, k: 'heap' | 'rss') => flat(r.full.map((s) => s[k]));
    const isFlat = rs.every((r) => flatOnceFull(r, 'heap') && flatOnceFull(r, 'rss'));
    heapHeld &&= rs.every((r) => r.heapGrowth <= 1.25 * maxBytes && flatOnceFull(r, 'heap'));
    const growth = ['heapGrowth', 'rssGrowth', 'peakRssGrowth'] as const;
    const [heap, rss, peak] = growth.map((k) => ratio((r) => r[k])) as [number, number, number];
    const ratios = { heap: round(heap), rss: round(rss), peak: round(peak) };
    streams.push({ readers: lanes, flags: y.label, ...ratios });
    const last = rs.at(-1) as StreamReport;
    const idsPerS = Math.round(median(rs.map((r) => args.ids / r.seconds)));
    return [
      ...[lanes, y.label, idsPerS, perId((r) => r.cpuMs), perId((r) => r.gcMs)],
      ...[`${last.scavenges}/${last.markCompacts}`, failed, heap.toFixed(2), rss.toFixed(2)],
      ...[peak.toFixed(2), met(peak <= 2), mib(median(rs.map((r) => r.peakRss)))],
      ...[isFlat ? 'flat' : 'NOT FLAT', `${last.startHeld} → ${last.peakHeld}`],
    ];
  });
  const last = cells[0]?.rs.at(-1);
  const text = [
    `stream: ${args.ids.toLocaleString('en-US')} distinct ids through Valkey, each setting in a fresh process; l1.maxBytes ${args['max-mib']} MiB, no row limit; ${last?.rows ?? 0} rows kept, ${mib(last?.countedBytes ?? 0)} MiB counted; growth from the start after warm-up, ÷ maxBytes, median of ${args.rounds} round(s)`,
    columns(table, [
      ...['readers', 'V8 flags', 'ids/s', 'CPU µs/id', 'GC µs/id', 'scav./MC', 'failed'],
      ...['heap (after GC)', 'RSS (after GC)', 'RSS peak', 'peak ≤ 2', 'RSS peak MiB', 'once full'],
      'MiB held young/old/besides: start → peak',
    ]),
    'targets: heap after GC ≤ 1.25 × maxBytes; RSS (after GC and at its peak) ≤ 2 × maxBytes; flat once L1 is full (heap and RSS after GC within ±10 %)',
    '',
    'calibration: rows set into a bare L1, what a row takes after GC against what L1 counts',
    columns(calibrate(), [
      ...['values', 'rows', 'heap B/row', 'buffers B/row', 'counted B/row', 'taken ÷ counted'],
    ]),
  ];
  process.stdout.write(`${text.join('\n')}\n`);
  if (args.json !== undefined)
    writeFileSync(args.json, `${JSON.stringify({ streams }, null, 2)}\n`);
  process.exit(args.check && !heapHeld ? 1 : 0);
}

await main();
