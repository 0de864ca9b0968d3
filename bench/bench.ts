/**
 * Benchmark: warm `Table.get` against a raw lru-cache `get`, a fleet herd's p99 − loader
 * time, HTTP L1 hits against a bare fastify route, and tagged rows against untagged ones
 * (warm `Table.get` and the HTTP L1 hit); ratios measured side by side in one run.
 * Prints figures, asserts nothing. Usage: drills/README.md#bench.
 */
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type autocannon from 'autocannon';
import Fastify from 'fastify';
import { LRUCache } from 'lru-cache';
import { pino } from 'pino';
import { drillArgs, int, text, valkeyOption } from '../drills/lib/cli.js';
import { columns, median, opsPerSecond, percentile } from '../drills/lib/report.js';
import { buildServer } from '../src/http/server.js';
import { withPolicy } from '../src/store/load-result.js';
import { createStore } from '../src/store/store.js';

const args = drillArgs({
  seconds: int(3, 1, 3_600),
  connections: int(50, 1, 10_000),
  only: text('inproc,fleet,http,tags'),
  valkey: valkeyOption(),
});
const { seconds, valkey } = args;
const KEYS = 1_000;
const value = (i: number) => ({
  id: String(i),
  name: `product ${i}`,
  price_cents: 1000 + i,
  tags: ['a', 'b'],
});

async function inProcess(): Promise<Array<[string, string]>> {
  const tableName = `bench-${process.pid}`;
  const store = await createStore({
    valkey: valkey,
    tables: {
      [tableName]: {
        load: (id) => value(Number(id)),
        l1: { ttlMs: 600_000, maxEntries: KEYS * 2 },
      },
    },
  });
  const t = store.table(tableName);
  const ids = Array.from({ length: KEYS }, (_, i) => String(i + 1));
  for (const id of ids) await t.get(id);
  const lru = new LRUCache<string, object>({ max: KEYS * 2 });
  // With a TTL as well: an L1 row has lifetimes, and every hit checks them.
  const lruTtl = new LRUCache<string, object>({ max: KEYS * 2, ttl: 300_000 });
  for (const id of ids) {
    lru.set(id, value(Number(id)));
    lruTtl.set(id, value(Number(id)));
  }

  const ms = seconds * 1000;
  // Warm-up, then measure alternately so drift on the machine hits both.
  await opsPerSecond(300, (i) => t.get(ids[i % KEYS] as string));
  await opsPerSecond(300, (i) => lru.get(ids[i % KEYS] as string), true);
  const raw = await opsPerSecond(ms, (i) => lru.get(ids[i % KEYS] as string), true);
  const rawAwait = await opsPerSecond(ms, async (i) => lru.get(ids[i % KEYS] as string));
  const ttlAwait = await opsPerSecond(ms, async (i) => lruTtl.get(ids[i % KEYS] as string));
  const warm = await opsPerSecond(ms, (i) => t.get(ids[i % KEYS] as string));
  const stats = t.stats();
  for (const id of ids) await t.invalidate(id);
  await store.close();
  return [
    ['raw lru-cache get (sync)', `${fmt(raw)} ops/s`],
    ['raw lru-cache get in an async fn + await', `${fmt(rawAwait)} ops/s`],
    ['Table.get, warm (L1 hit)', `${fmt(warm)} ops/s`],
    ['ratio Table.get / raw get', `${(warm / raw).toFixed(3)}`],
    ['raw lru-cache (ttl 300 s) get in an async fn + await', `${fmt(ttlAwait)} ops/s`],
    ['ratio Table.get / awaited raw get', `${(warm / rawAwait).toFixed(3)}`],
    ['ratio Table.get / awaited raw get with TTL', `${(warm / ttlAwait).toFixed(3)}`],
    ['L1 hits during the run (misses)', `${stats.hits} (${stats.misses - KEYS})`],
  ];
}

/** What the HTTP comparison measured (`--json`): medians and each round's req/s ratio. */
export interface HttpFigures {
  ratio: number;
  ratios: number[];
  cpuRatio: number;
  bareRps: number;
  cacheRps: number;
  errors: number;
}

async function http(): Promise<{ rows: Array<[string, string]>; figures: HttpFigures }> {
  const tableName = `bench-http-${process.pid}`;
  const store = await createStore({
    valkey: valkey,
    tables: { [tableName]: { load: () => value(42), l1: { ttlMs: 600_000 } } },
  });
  const app = buildServer({ store, logger: pino({ level: 'silent' }) });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const body = JSON.stringify(value(42));
  const bare = Fastify({ logger: false });
  bare.get('/v1/tables/:table/items/:id', (_req, reply) => {
    reply.type('application/json; charset=utf-8').send(body);
  });
  await bare.listen({ host: '127.0.0.1', port: 0 });
  const path = `/v1/tables/${tableName}/items/42`;
  const urlOf = (a: { server: { address(): unknown } }) => {
    const { port } = a.server.address() as { port: number };
    return `http://127.0.0.1:${port}${path}`;
  };
  const cacheUrl = urlOf(app);
  const bareUrl = urlOf(bare);
  const warm = await fetch(cacheUrl);
  if ((await warm.text()) !== body) throw new Error('the cached body differs from the bare body');
  // The load generator runs in its own process: in this one it would take the
  // event loop from the servers it measures.
  // Besides req/s (which the load generator on the same cores also decides),
  // the servers' own CPU time per request: this process runs nothing else meanwhile.
  const run = async (url: string, duration: number) => {
    const cpu = process.cpuUsage();
    const r = await loadFrom(url, args.connections, duration);
    const used = process.cpuUsage(cpu);
    return {
      rps: r.requests.average,
      p99: r.latency.p99,
      errors: r.errors + r.non2xx,
      cpuUs: (used.user + used.system) / Math.max(1, r.requests.total),
    };
  };
  await run(cacheUrl, 1);
  await run(bareUrl, 1);
  // Alternating rounds, so drift on the machine hits both; the median round's figures.
  type Round = { rps: number; p99: number; errors: number; cpuUs: number };
  const bares: Round[] = [];
  const caches: Round[] = [];
  const ratios: number[] = [];
  const cpuRatios: number[] = [];
  for (let round = 0; round < HTTP_ROUNDS; round++) {
    const bb = await run(bareUrl, seconds);
    const cc = await run(cacheUrl, seconds);
    bares.push(bb);
    caches.push(cc);
    ratios.push(cc.rps / bb.rps);
    cpuRatios.push(bb.cpuUs / cc.cpuUs);
  }
  const mid = (xs: Array<{ rps: number }>) => [...xs].sort((x, y) => x.rps - y.rps)[xs.length >> 1];
  const b = mid(bares) as Round;
  const c = mid(caches) as Round;
  await app.close();
  await bare.close();
  await store.table(tableName).invalidate('42');
  await store.close();
  const figures: HttpFigures = {
    ratio: median(ratios),
    ratios,
    cpuRatio: median(cpuRatios),
    bareRps: b.rps,
    cacheRps: c.rps,
    errors: [...bares, ...caches].reduce((n, r) => n + r.errors, 0),
  };
  const rows: Array<[string, string]> = [
    [
      'bare fastify route, same body',
      `${fmt(b.rps)} req/s, p99 ${b.p99} ms, errors ${b.errors}, ${b.cpuUs.toFixed(1)} µs CPU/req`,
    ],
    [
      'echostore GET (L1 hit)',
      `${fmt(c.rps)} req/s, p99 ${c.p99} ms, errors ${c.errors}, ${c.cpuUs.toFixed(1)} µs CPU/req`,
    ],
    [
      `ratio echostore / bare, median of ${HTTP_ROUNDS} rounds (each round)`,
      `${median(ratios).toFixed(3)} (${ratios.map((r) => r.toFixed(2)).join(', ')})`,
    ],
    [
      'ratio of server CPU per request, bare / echostore, median (each round)',
      `${median(cpuRatios).toFixed(3)} (${cpuRatios.map((r) => r.toFixed(2)).join(', ')})`,
    ],
    ['target: req/s ratio ≥ 0.95', median(ratios) >= 0.95 ? 'met' : 'GAP'],
  ];
  return { rows, figures };
}

/**
 * Fleet herd: S stores (separate Valkey connections, as separate instances
 * would have) each with R concurrent cold readers of one id. One store holds
 * the lease and loads; the others are contended and must be woken by the
 * fill's PUBLISH. The overhead a reader pays beyond the loader's own time is
 * p99 − loader time, measured in the same run; polling alone would cost up to
 * the 250 ms poll interval.
 */
async function fleetHerd(): Promise<Array<[string, string]>> {
  const stores = 4;
  const readers = 50;
  const loadMs = 50;
  const rounds = 5;
  const tableName = `bench-fleet-${process.pid}`;
  let loaderMs = 0;
  let loads = 0;
  const load = async (id: string) => {
    const started = performance.now();
    await new Promise((r) => setTimeout(r, loadMs));
    loaderMs = performance.now() - started;
    loads++;
    return { id };
  };
  const all = await Promise.all(
    Array.from({ length: stores }, () =>
      createStore({ valkey: valkey, tables: { [tableName]: { load } } }),
    ),
  );
  const overheads: number[] = [];
  const p99s: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const id = `fleet-${Date.now()}-${round}`;
    const started = performance.now();
    const latencies = await Promise.all(
      all.flatMap((s) =>
        Array.from({ length: readers }, () =>
          s
            .table(tableName)
            .get(id)
            .then(() => performance.now() - started),
        ),
      ),
    );
    const p99 = percentile(latencies, 99);
    p99s.push(p99);
    overheads.push(p99 - loaderMs);
    await all[0]?.table(tableName).invalidate(id);
  }
  await Promise.all(all.map((s) => s.close()));
  // rounds is odd, so the nearest-rank 50th percentile is the middle round.
  return [
    ['instances × readers, rounds', `${stores} × ${readers}, ${rounds}`],
    ['source reads per round (law: 1)', `${(loads / rounds).toFixed(2)}`],
    ['loader time (measured)', `${loaderMs.toFixed(1)} ms`],
    ['herd p99, median of rounds', `${median(p99s).toFixed(1)} ms`],
    [
      'p99 − loader time, median (worst)',
      `${median(overheads).toFixed(1)} ms (${Math.max(...overheads).toFixed(1)} ms)`,
    ],
    ['poll interval, for comparison', '250 ms'],
  ];
}

const HTTP_ROUNDS = 5;

/** The tags of bench row `i`: three, as a catalogue row might carry (product, category, brand). */
const tagsOf = (i: number) => [`product:${i}`, `category:${i % 50}`, `brand:${i % 7}`];

/**
 * Tagged against untagged rows, in one store: warm `Table.get` (alternating rounds of each,
 * the median ratio) and the HTTP L1 hit (autocannon, alternating rounds). Both tables are
 * purged by a tag none of their rows carries after the rows were read, so each row has
 * outlived a purge (the case that makes a hit look at the epochs at all).
 */
async function taggedRows(): Promise<Array<[string, string]>> {
  const plain = `bench-plain-${process.pid}`;
  const tagged = `bench-tagged-${process.pid}`;
  const l1 = { ttlMs: 600_000, maxEntries: KEYS * 2 };
  const store = await createStore({
    valkey,
    tables: {
      [plain]: { load: (id) => value(Number(id)), l1 },
      [tagged]: { load: (id) => withPolicy(value(Number(id)), { tags: tagsOf(Number(id)) }), l1 },
    },
  });
  const ids = Array.from({ length: KEYS }, (_, i) => String(i + 1));
  const tables = [store.table(plain), store.table(tagged)] as const;
  for (const t of tables) {
    for (const id of ids) await t.get(id);
    await t.purge({ tags: ['no-row-has-it'] });
  }
  const ms = Math.max(500, (seconds * 1000) / 2);
  const get = (t: (typeof tables)[number]) => (i: number) => t.get(ids[i % KEYS] as string);
  for (const t of tables) await opsPerSecond(300, get(t));
  const inproc: number[][] = [[], []];
  // Alternating which goes first (ABBA), so drift on a shared machine hits both alike.
  for (let round = 0; round < 6; round++) {
    const order = round % 2 === 0 ? [0, 1] : [1, 0];
    for (const k of order)
      inproc[k]?.push(await opsPerSecond(ms, get(tables[k] as (typeof tables)[number])));
  }
  const [plainOps, taggedOps] = inproc.map((xs) => median(xs)) as [number, number];
  const inprocRatios = (inproc[1] as number[]).map((x, i) => x / (inproc[0]?.[i] as number));

  const app = buildServer({ store, logger: pino({ level: 'silent' }) });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as { port: number };
  const urlOf = (table: string) => `http://127.0.0.1:${port}/v1/tables/${table}/items/42`;
  for (const t of [plain, tagged]) await loadFrom(urlOf(t), args.connections, 1);
  const rps: number[][] = [[], []];
  for (let round = 0; round < HTTP_ROUNDS + 1; round++) {
    const order = round % 2 === 0 ? [0, 1] : [1, 0];
    for (const k of order) {
      const t = [plain, tagged][k] as string;
      rps[k]?.push((await loadFrom(urlOf(t), args.connections, seconds)).requests.average);
    }
  }
  const httpRatios = (rps[1] as number[]).map((x, i) => x / (rps[0]?.[i] as number));
  await app.close();
  for (const t of tables) await t.purge({ all: true });
  await store.close();
  const within = (r: number) => (r >= 0.95 ? 'met' : 'GAP');
  return [
    ['Table.get warm, untagged rows (median of 6)', `${fmt(plainOps)} ops/s`],
    ['Table.get warm, rows of 3 tags (median of 6)', `${fmt(taggedOps)} ops/s`],
    [
      'ratio tagged / untagged, median (each round)',
      `${median(inprocRatios).toFixed(3)} (${inprocRatios.map((r) => r.toFixed(2)).join(', ')})`,
    ],
    ['HTTP L1 hit, untagged row (median)', `${fmt(median(rps[0] as number[]))} req/s`],
    ['HTTP L1 hit, row of 3 tags (median)', `${fmt(median(rps[1] as number[]))} req/s`],
    [
      `ratio tagged / untagged, median of ${HTTP_ROUNDS + 1} rounds (each round)`,
      `${median(httpRatios).toFixed(3)} (${httpRatios.map((r) => r.toFixed(2)).join(', ')})`,
    ],
    [
      'target: both ratios ≥ 0.95',
      `${within(median(inprocRatios))} / ${within(median(httpRatios))}`,
    ],
  ];
}

/** autocannon in a child process against `url`; its JSON result. */
function loadFrom(url: string, connections: number, seconds: number): Promise<autocannon.Result> {
  const cli = createRequire(import.meta.url).resolve('autocannon/autocannon.js');
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [cli, '--json', '-c', String(connections), '-d', String(seconds), url],
      { maxBuffer: 16 * 1024 * 1024 },
      (err, stdout) => (err ? reject(err) : resolve(JSON.parse(stdout) as autocannon.Result)),
    );
  });
}

function fmt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

const only = new Set(args.only.split(','));
if (only.has('inproc')) {
  const ip = await inProcess();
  process.stdout.write(`in-process, ${KEYS} warm keys, ${seconds} s each\n${columns(ip)}\n\n`);
}
if (only.has('fleet')) {
  const f = await fleetHerd();
  process.stdout.write(`fleet herd (lease; losers woken by the fill's PUBLISH)\n${columns(f)}\n\n`);
}
if (only.has('tags')) {
  const tg = await taggedRows();
  process.stdout.write(
    `tagged rows against untagged ones, each table purged once by a tag no row carries\n${columns(tg)}\n\n`,
  );
}
const report: Record<string, unknown> = {};
if (only.has('http')) {
  const h = await http();
  report.http = h.figures;
  process.stdout.write(
    `HTTP, autocannon ${args.connections} connections, ${seconds} s each (load generator in its own process)\n${columns(h.rows)}\n`,
  );
}
// `--json <file>`: the figures `bench:peers` reads (its `http` section runs this one).
if (args.json !== undefined && args.json !== '-') {
  writeFileSync(args.json, `${JSON.stringify(report, null, 2)}\n`);
}
