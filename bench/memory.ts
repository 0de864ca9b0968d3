/**
 * Does `l1.maxBytes` bound real memory? Streams `--ids` distinct ids through a store (heap
 * after GC and RSS sampled), then calibrates heap per row against what L1 counts; needs
 * `--expose-gc`. With `--check`, exits 1 when the heap bound or its flatness is missed. Usage:
 * drills/README.md#benchmemory.
 */
import { randomBytes } from 'node:crypto';
import { getHeapSpaceStatistics } from 'node:v8';
import { drillArgs, flag, int, valkeyOption } from '../drills/lib/cli.js';
import { columns, machineLine } from '../drills/lib/report.js';
import { connectAdmin, dropTable } from '../drills/lib/store.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from '../src/l2/format.js';
import { L1 } from '../src/store/l1.js';
import { DEFAULT_POLICY } from '../src/store/policy.js';
import { createStore } from '../src/store/store.js';

const args = drillArgs({
  ids: int(1_000_000, 1),
  'max-mib': int(64, 1),
  lanes: int(64, 1, 10_000),
  check: flag(),
  valkey: valkeyOption(),
});
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  process.stderr.write('bench:memory needs node --expose-gc (npm run bench:memory passes it)\n');
  process.exit(2);
}
const MiB = 1024 * 1024;
const mib = (bytes: number) => (bytes / MiB).toFixed(1);

/** Heap used after a full GC, and RSS, bytes; what V8 holds for its heap, and outside it. */
function settled(): { heap: number; rss: number; heapTotal: number; external: number } {
  gc?.();
  gc?.();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss, heapTotal: m.heapTotal, external: m.external };
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
  // An L2 value's JSON text is a slice of the stored envelope, which it keeps alive.
  return fromL2 ? (decodeEnvelope(encodeEnvelope(env)) as Envelope) : env;
}

function calibrate(): Array<Array<string | number>> {
  const rows: Array<Array<string | number>> = [];
  for (const [label, bytes, n] of [
    ['small (~100 B JSON)', 100, 100_000],
    ['medium (~600 B)', 600, 50_000],
    ['large (~6 KB)', 6_000, 5_000],
  ] as const) {
    for (const fromL2 of [false, true]) {
      const l1 = new L1(
        { ...DEFAULT_POLICY.l1, maxEntries: 10_000_000, maxBytes: 4 * 1024 * MiB, ttlMs: 1e9 },
        0,
      );
      const before = settled().heap;
      for (let i = 0; i < n; i++) {
        const id = String(1_000_000 + i);
        l1.set(id, envelopeOf(id, bytes, fromL2), performance.now());
      }
      const heap = settled().heap - before;
      rows.push([
        `${label}, ${fromL2 ? 'from L2' : 'from the loader'}`,
        n,
        Math.round(heap / n),
        Math.round(l1.bytes / n),
        (heap / l1.bytes).toFixed(2),
      ]);
      l1.clear();
    }
  }
  return rows;
}

/** @returns whether the heap stayed within its targets (bound and flat). */
async function stream(): Promise<boolean> {
  const { ids, lanes, valkey } = args;
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
        l1: { maxBytes, maxEntries: 100_000_000, ttlMs: 600_000 },
      },
    },
  });
  const t = store.table(table);
  await t.get('warm-up');
  await t.invalidate('warm-up');
  const start = settled();
  const samples: Array<Array<string | number>> = [];
  /** Heap after GC and RSS, absolute, of the samples taken once L1 was full. */
  const full: Array<{ heap: number; rss: number }> = [];
  let next = 0;
  let failed = 0;
  const failures: Record<string, number> = {};
  let mark = ids / 10;
  const started = performance.now();
  const lane = async () => {
    while (next < ids) {
      const id = String(next++);
      await t.get(id).catch((err: { code?: string }) => {
        failed++;
        failures[err.code ?? 'other'] = (failures[err.code ?? 'other'] ?? 0) + 1;
      });
    }
  };
  const sample = () => {
    const s = settled();
    const st = t.stats();
    if (st.l1_bytes >= 0.95 * maxBytes) full.push(s);
    samples.push([
      `${Math.round((100 * next) / ids)} %`,
      st.l1_entries,
      mib(st.l1_bytes),
      mib(s.heap - start.heap),
      mib(s.rss - start.rss),
    ]);
    return s;
  };
  const sampler = (async () => {
    while (next < ids) {
      await new Promise((r) => setTimeout(r, 50));
      if (next >= mark) {
        sample();
        mark += ids / 10;
      }
    }
  })();
  await Promise.all(Array.from({ length: lanes }, lane));
  await sampler;
  const end = samples.length >= 10 ? settled() : sample();
  const seconds = (performance.now() - started) / 1000;
  const heaps = full.map((s) => s.heap);
  const rsses = full.map((s) => s.rss);
  const flat = (xs: number[]) =>
    xs.length < 2 || (Math.max(...xs) - Math.min(...xs)) / Math.max(...xs) <= 0.2;
  const heapGrowth = end.heap - start.heap;
  const rssGrowth = end.rss - start.rss;
  const stats = t.stats();
  const redis = await connectAdmin(valkey);
  await store.close();
  await dropTable(redis, table).catch(() => 0);
  redis.disconnect();
  const verdict = (ok: boolean) => (ok ? 'met' : 'GAP');
  process.stdout.write(
    `stream: ${ids.toLocaleString('en-US')} distinct ids, ${lanes} at a time, through Valkey; l1.maxBytes ${args['max-mib']} MiB, no row limit (${seconds.toFixed(0)} s, ${failed} failed${failed > 0 ? `: ${JSON.stringify(failures)}` : ''})\n${columns(samples, ['progress', 'L1 rows', 'L1 counted MiB', 'heap growth MiB (after GC)', 'RSS growth MiB'])}\n\n`,
  );
  process.stdout.write(
    `${columns([
      ['heap at start (after GC), RSS at start', `${mib(start.heap)} MiB, ${mib(start.rss)} MiB`],
      ['heap at end (after GC), RSS at end', `${mib(end.heap)} MiB, ${mib(end.rss)} MiB`],
      [
        'V8 spaces at end, MiB held / used',
        getHeapSpaceStatistics()
          .filter((x) => x.space_size > 4 * MiB)
          .map((x) => `${x.space_name} ${mib(x.space_size)} / ${mib(x.space_used_size)}`)
          .join(', '),
      ],
      [
        'heap V8 holds (start → end), outside the heap (start → end)',
        `${mib(start.heapTotal)} → ${mib(end.heapTotal)} MiB, ${mib(start.external)} → ${mib(end.external)} MiB`,
      ],
      ['rows kept, bytes counted', `${stats.l1_entries}, ${mib(stats.l1_bytes)} MiB`],
      [
        'target: heap growth ≤ 1.25 × maxBytes',
        `${(heapGrowth / maxBytes).toFixed(2)} × ${verdict(heapGrowth <= 1.25 * maxBytes)}`,
      ],
      [
        'target: RSS growth ≤ 2 × maxBytes',
        `${(rssGrowth / maxBytes).toFixed(2)} × ${verdict(rssGrowth <= 2 * maxBytes)}`,
      ],
      [
        'target: flat once L1 is full (heap and RSS within ±10 %)',
        verdict(flat(heaps) && flat(rsses)),
      ],
    ])}\n`,
  );
  return heapGrowth <= 1.25 * maxBytes && flat(heaps);
}

process.stdout.write(`bench:memory ${new Date().toISOString()}\n${machineLine()}\n\n`);
// The stream first, in a fresh process: the calibration's garbage would leave
// pages behind and flatter the stream's RSS growth.
const heapHeld = await stream();
process.stdout.write(
  `\ncalibration: rows set into a bare L1, heap per row after GC against what L1 counts\n${columns(calibrate(), ['values', 'rows', 'heap B/row', 'counted B/row', 'heap ÷ counted'])}\n`,
);
process.exit(args.check && !heapHeld ? 1 : 0);
