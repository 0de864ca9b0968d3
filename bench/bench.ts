/**
 * Benchmark: the HTTP L1 hit against a bare fastify route, and tagged rows against untagged ones;
 * ratios measured side by side in one run. Prints figures, asserts nothing. Usage:
 * drills/README.md#bench.
 */
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { connect } from 'node:net';
import type autocannon from 'autocannon';
import Fastify from 'fastify';
import { pino } from 'pino';
import { drillArgs, int, listOf, setUp, valkeyOption } from '../drills/lib/cli.js';
import { columns, median, met, opsPerCpuSecond } from '../drills/lib/report.js';
import { connectAdmin } from '../drills/lib/store.js';
import { runNode } from '../drills/lib/workers.js';
import { buildServer } from '../src/http/server.js';
import { withPolicy } from '../src/store/load-result.js';
import { createStore } from '../src/store/store.js';

const args = drillArgs(
  {
    seconds: int(3, 1, 3_600),
    connections: int(50, 1, 10_000),
    only: listOf('http', 'tags'),
    valkey: valkeyOption(),
  },
  { jsonFileOnly: true },
);
const { seconds, valkey, connections } = args;
// Both sections need the server: one line and exit 2 when it does not answer.
await setUp(
  'bench',
  connectAdmin(valkey).then((admin) => admin.disconnect()),
);
const KEYS = 1_000;
const HTTP_ROUNDS = 5;
const value = (i: number) => ({
  id: String(i),
  name: `product ${i}`,
  price_cents: 1000 + i,
  tags: ['a', 'b'],
});
const ids = Array.from({ length: KEYS }, (_, i) => String(i + 1));
const nth = (i: number) => ids[i % KEYS] as string;
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
/** `0.987 (0.98, 1.01, …)`: the median ratio and each round's. */
const ratios = (xs: number[]) =>
  `${median(xs).toFixed(3)} (${xs.map((r) => r.toFixed(2)).join(', ')})`;

/** Runs each of `runs` once per round, `rounds` times, in turn (ABBA with `swap`): per run, its results. */
async function alternating<T>(rounds: number, runs: Array<() => Promise<T>>, swap = true) {
  const out = runs.map(() => [] as T[]);
  for (let round = 0; round < rounds; round++) {
    const order = runs.map((_, i) => (swap && round % 2 === 1 ? runs.length - 1 - i : i));
    for (const k of order) out[k]?.push(await (runs[k] as () => Promise<T>)());
  }
  return out;
}

/** autocannon in a child process against `url` (in this one it would take the event loop from the servers it measures). */
async function loadFrom(url: string, duration: number): Promise<autocannon.Result> {
  const cli = createRequire(import.meta.url).resolve('autocannon/autocannon.js');
  const argv = [cli, '--json', '-c', String(connections), '-d', String(duration), url];
  return JSON.parse(await runNode(argv)) as autocannon.Result;
}

/** The bytes of one response of `url` on the wire, head and body (a raw HTTP/1.1 GET). */
async function responseBytes(url: string): Promise<number> {
  const { hostname, port, pathname } = new URL(url);
  const socket = connect(Number(port), hostname);
  socket.write(`GET ${pathname} HTTP/1.1\r\nhost: ${hostname}\r\nconnection: close\r\n\r\n`);
  let bytes = 0;
  for await (const chunk of socket) bytes += (chunk as Buffer).length;
  return bytes;
}

/** What the HTTP comparison measured (`--json`, read by `bench:peers`): medians and each round's req/s ratio. */
export type HttpFigures = Awaited<ReturnType<typeof http>>['figures'];

async function http() {
  const table = `bench-http-${process.pid}`;
  const store = await createStore({
    valkey,
    tables: { [table]: { load: () => value(42), l1: { ttlMs: 600_000 } } },
  });
  const app = buildServer({ store, logger: pino({ level: 'silent' }) });
  const body = JSON.stringify(value(42));
  /** A bare fastify route sending the same body with `headers`. */
  const route = (headers: Record<string, string>) =>
    Fastify({ logger: false }).get('/v1/tables/:table/items/:id', (_req, reply) => {
      reply.headers(headers).type('application/json; charset=utf-8').send(body);
    });
  // The same route sending the hit's own headers as fixed strings: what those bytes cost a bare
  // route, to tell the hit path's own cost from its headers' (RFC 9211 Cache-Status, Age, …).
  const hitHeaders: Record<string, string> = {};
  const [bare, alike] = [route({}), route(hitHeaders)];
  const [cacheUrl, bareUrl, alikeUrl] = (await Promise.all(
    [app, bare, alike].map(
      async (a) => `${await a.listen({ host: '127.0.0.1', port: 0 })}/v1/tables/${table}/items/42`,
    ),
  )) as [string, string, string];
  const first = await fetch(cacheUrl);
  if ((await first.text()) !== body) throw new Error('the cached body differs from the bare body');
  for (const name of ['cache-status', 'cache-control', 'age', 'etag'])
    hitHeaders[name] = first.headers.get(name) ?? '';
  const [hitBytes, bareBytes, alikeBytes] = await Promise.all(
    [cacheUrl, bareUrl, alikeUrl].map(responseBytes),
  );
  // Besides req/s (which the load generator on the same cores also decides), the servers' own
  // CPU time per request: this process runs nothing else meanwhile.
  const run = async (url: string, duration: number) => {
    const cpu = process.cpuUsage();
    const r = await loadFrom(url, duration);
    const used = process.cpuUsage(cpu);
    const cpuUs = (used.user + used.system) / Math.max(1, r.requests.total);
    return { rps: r.requests.average, p99: r.latency.p99, errors: r.errors + r.non2xx, cpuUs };
  };
  for (const url of [cacheUrl, bareUrl, alikeUrl]) await run(url, 1);
  // Rounds of bare, cache, alike, so drift on the machine hits all three; the median round's figures.
  type Run = Awaited<ReturnType<typeof run>>;
  const [bares, caches, alikes] = (await alternating(
    HTTP_ROUNDS,
    [() => run(bareUrl, seconds), () => run(cacheUrl, seconds), () => run(alikeUrl, seconds)],
    false,
  )) as [Run[], Run[], Run[]];
  const rps = bares.map((b, i) => (caches[i]?.rps as number) / b.rps);
  const cpu = bares.map((b, i) => b.cpuUs / (caches[i]?.cpuUs as number));
  const rpsAlike = alikes.map((a, i) => (caches[i]?.rps as number) / a.rps);
  const mid = (xs: Run[]) => [...xs].sort((x, y) => x.rps - y.rps)[xs.length >> 1] as Run;
  const [b, c, a] = [mid(bares), mid(caches), mid(alikes)];
  for (const server of [app, bare, alike]) await server.close();
  await store.table(table).invalidate('42');
  await store.close();
  const errors = [...bares, ...caches].reduce((n, r) => n + r.errors, 0);
  const line = (x: typeof b) =>
    `${fmt(x.rps)} req/s, p99 ${x.p99} ms, errors ${x.errors}, ${x.cpuUs.toFixed(1)} µs CPU/req`;
  return {
    rows: [
      [`bare fastify route, same body (${bareBytes} bytes a response)`, line(b)],
      [`echostore GET (L1 hit, ${hitBytes} bytes)`, line(c)],
      [`bare fastify route sending the hit's headers (${alikeBytes} bytes)`, line(a)],
      [`ratio echostore / bare, median of ${HTTP_ROUNDS} rounds (each round)`, ratios(rps)],
      ['ratio of server CPU per request, bare / echostore, median (each round)', ratios(cpu)],
      ["ratio echostore / bare sending the hit's headers, median (each round)", ratios(rpsAlike)],
      ['target: req/s ratio ≥ 0.95', met(median(rps) >= 0.95)],
    ],
    // ratioSameHeaders: echostore ÷ the bare route sending the hit's headers as fixed strings.
    figures: {
      ...{ ratio: median(rps), ratios: rps, ratioSameHeaders: median(rpsAlike) },
      ...{ cpuRatio: median(cpu), bareRps: b.rps, cacheRps: c.rps, errors },
    },
  };
}

/**
 * Tagged against untagged rows, in one store: warm `Table.get` and the HTTP L1 hit, in
 * alternating rounds of each (ABBA), the median ratio. Both tables are purged by a tag none of
 * their rows carries after the rows were read, so each row has outlived a purge (the case that
 * makes a hit look at the epochs at all). A row carries three tags, as a catalogue row might
 * (product, category, brand).
 */
async function taggedRows(): Promise<string[][]> {
  const [plain, tagged] = [`bench-plain-${process.pid}`, `bench-tagged-${process.pid}`];
  const l1 = { ttlMs: 600_000, maxEntries: KEYS * 2 };
  const tags = (i: number) => [`product:${i}`, `category:${i % 50}`, `brand:${i % 7}`];
  const store = await createStore({
    valkey,
    tables: {
      [plain]: { load: (id) => value(Number(id)), l1 },
      [tagged]: { load: (id) => withPolicy(value(Number(id)), { tags: tags(Number(id)) }), l1 },
    },
  });
  const tables = [store.table(plain), store.table(tagged)];
  for (const t of tables) {
    for (const id of ids) await t.get(id);
    await t.purge({ tags: ['no-row-has-it'] });
    await opsPerCpuSecond(300, (i) => t.get(nth(i)));
  }
  const ms = Math.max(500, (seconds * 1000) / 2);
  const [plainOps, taggedOps] = (await alternating(
    6,
    tables.map((t) => () => opsPerCpuSecond(ms, (i) => t.get(nth(i)))),
  )) as [number[], number[]];
  const app = buildServer({ store, logger: pino({ level: 'silent' }) });
  const base = await app.listen({ host: '127.0.0.1', port: 0 });
  const urls = [plain, tagged].map((t) => `${base}/v1/tables/${t}/items/42`);
  for (const url of urls) await loadFrom(url, 1);
  const [plainRps, taggedRps] = (await alternating(
    HTTP_ROUNDS + 1,
    urls.map((url) => async () => (await loadFrom(url, seconds)).requests.average),
  )) as [number[], number[]];
  await app.close();
  for (const t of tables) await t.purge({ all: true });
  await store.close();
  const inproc = taggedOps.map((x, i) => x / (plainOps[i] as number));
  const viaHttp = taggedRps.map((x, i) => x / (plainRps[i] as number));
  const within = (xs: number[]) => met(median(xs) >= 0.95);
  return [
    ['Table.get warm, untagged rows (median of 6)', `${fmt(median(plainOps))} ops per CPU-second`],
    [
      'Table.get warm, rows of 3 tags (median of 6)',
      `${fmt(median(taggedOps))} ops per CPU-second`,
    ],
    ['ratio tagged / untagged, median (each round)', ratios(inproc)],
    ['HTTP L1 hit, untagged row (median)', `${fmt(median(plainRps))} req/s`],
    ['HTTP L1 hit, row of 3 tags (median)', `${fmt(median(taggedRps))} req/s`],
    [`ratio tagged / untagged, median of ${HTTP_ROUNDS + 1} rounds (each round)`, ratios(viaHttp)],
    ['target: both ratios ≥ 0.95', `${within(inproc)} / ${within(viaHttp)}`],
  ];
}

const only = new Set(args.only);
const print = (title: string, rows: string[][]) =>
  process.stdout.write(`${title}\n${columns(rows)}\n\n`);
if (only.has('tags')) {
  print(
    'tagged rows against untagged ones, each table purged once by a tag no row carries',
    await taggedRows(),
  );
}
const report: Record<string, unknown> = {};
if (only.has('http')) {
  const h = await http();
  report.http = h.figures;
  print(
    `HTTP, autocannon ${connections} connections, ${seconds} s each (load generator in its own process)`,
    h.rows,
  );
}
// `--json <file>`: the figures `bench:peers` reads (its `http` section runs this one).
if (args.json !== undefined) writeFileSync(args.json, `${JSON.stringify(report, null, 2)}\n`);
