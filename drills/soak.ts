/**
 * Soak drill: mixed load (autocannon) through one service for a bounded time → no 5xx but
 * `ECC_SHED`, nothing unanswered, nothing in flight at rest, memory bounded and flat with L1 full.
 * Usage and laws: drills/README.md#soak.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { metric, scrape } from '../harness/metrics.js';
import { withOrigin } from '../harness/origin.js';
import { type Service, startService } from '../harness/service.js';
import { drillArgs, float, int, runDrill, valkeyOption } from './lib/cli.js';
import { errorCode, itemUrl, readItems } from './lib/http.js';
import { bump, check, columns, law, listCounts, median, p50p99, round, sum } from './lib/report.js';
import { connectAdmin, dropTable, originConfig } from './lib/store.js';

const args = drillArgs({
  seconds: int(120, 1),
  connections: int(32, 1),
  'hot-ids': int(1000, 1),
  'latency-ms': float(5, 0),
  'l1-mib': int(16, 1),
  valkey: valkeyOption(),
});
const { seconds, connections } = args;
const L1_BYTES = args['l1-mib'] * 2 ** 20;

/** What a request of the mix does, and its share. */
const WEIGHTS = { 'hot GET': 0.7, 'cold GET': 0.2, PUT: 0.05, DELETE: 0.05 };
type Kind = keyof typeof WEIGHTS;
const KINDS = Object.keys(WEIGHTS) as Kind[];
/** The shares of the kinds up to each one: a uniform draw below the first is a hot GET, … */
const UP_TO = KINDS.map((_, i) => sum(KINDS.slice(0, i + 1), (k) => WEIGHTS[k]));
const MAX_CONCURRENT_LOADS = 32;
/**
 * RSS at the end may be at most this multiple of RSS at the start (after warm-up, idle): a
 * healthy process ends well above its idle size (V8's working heap, L1 full, socket buffers);
 * memory that grows with the request count (tens of thousands of cold ids a minute) does not.
 */
const MAX_RSS_GROWTH = 3;
/** RSS and heap after GC at the end may be this far off their value once L1 became full. */
const FLAT_TOLERANCE = 0.1;
/** V8 sizes its generations to the load for about this long after L1 fills; flatness is judged after it. */
const SETTLE_S = 60;

/** The service's memory from its `/metrics`, bytes: RSS, heap after the latest full GC, L1. */
async function memory(url: string, table: string, atS: number) {
  const m = await scrape(url);
  const rss = metric(m, 'process_resident_memory_bytes') ?? Number.NaN;
  const heapAfterGc = metric(m, 'nodejs_heap_after_gc_bytes') ?? Number.NaN;
  return { atS, rss, heapAfterGc, l1Bytes: metric(m, 'echostore_l1_bytes', { table }) ?? 0 };
}
type Memory = Awaited<ReturnType<typeof memory>>;

/**
 * Is memory flat once L1 is full (95 % of its bytes)? The median RSS and heap after GC of the
 * first and last minute from {@link SETTLE_S} later on; judged when that span is half the run.
 */
function flatness(samples: Memory[]) {
  const full = samples.find((s) => s.l1Bytes >= 0.95 * L1_BYTES);
  const end = samples.at(-1) as Memory;
  const fromS = full === undefined ? undefined : full.atS + SETTLE_S;
  const at = (xs: Memory[]) =>
    xs.length === 0
      ? undefined
      : { rss: median(xs.map((s) => s.rss)), heap: median(xs.map((s) => s.heapAfterGc)) };
  const first = at(
    samples.filter((s) => fromS !== undefined && s.atS >= fromS && s.atS < fromS + 60),
  );
  const last = at(samples.filter((s) => s.atS > end.atS - 60));
  const judged = fromS !== undefined && end.atS - fromS >= seconds / 2 && !!first && !!last;
  const rssChange = judged ? round(last.rss / first.rss - 1, 3) : 0;
  const heapChange = judged ? round(last.heap / first.heap - 1, 3) : 0;
  const pass = Math.abs(rssChange) <= FLAT_TOLERANCE && Math.abs(heapChange) <= FLAT_TOLERANCE;
  return { fullAtS: full?.atS, fromS, judged, first, last, rssChange, heapChange, pass };
}

/**
 * The mixed load for autocannon: `setupRequest` draws each request's kind, `onResponse` tallies
 * by kind (with `pipelining: 1` a connection's context holds the one request in flight).
 */
function mixedLoad(table: string, tag: string) {
  const byKind = Object.fromEntries(
    KINDS.map((k) => [k, { statuses: {} as Record<string, number>, ms: [] as number[], l1: 0 }]),
  ) as Record<Kind, { statuses: Record<string, number>; ms: number[]; l1: number }>;
  const tally = { byKind, errorCodes: {} as Record<string, number>, responses: 0 };
  let [cold, writes] = [0, 0];
  const request: autocannon.Request = {
    setupRequest(req, context) {
      const r = Math.random();
      const kind = KINDS[UP_TO.findIndex((u) => r < u)] ?? 'hot GET';
      Object.assign(context, { kind, sentAtMs: performance.now() });
      const hot = `hot-${Math.floor(Math.random() * args['hot-ids'])}`;
      const id = kind === 'cold GET' ? `cold-${tag}-${cold++}` : hot;
      const path = itemUrl('', table, id);
      const method = kind === 'DELETE' ? 'DELETE' : 'GET';
      if (kind !== 'PUT') return { ...req, method, path, headers: {} };
      const body = JSON.stringify({ id, write: ++writes, at: Date.now() });
      return { ...req, method: 'PUT', path, headers: { 'content-type': 'application/json' }, body };
    },
    onResponse(status, body, context, headers) {
      const { kind, sentAtMs } = context as { kind: Kind; sentAtMs: number };
      const t = byKind[kind];
      tally.responses++;
      bump(t.statuses, String(status));
      t.ms.push(performance.now() - sentAtMs);
      const cacheStatus = Object.entries(headers ?? {}).find(([k]) => /^cache-status$/i.test(k));
      if (status >= 300) bump(tally.errorCodes, `${status} ${errorCode(body) ?? '-'}`);
      else if (/detail=l1(?:;|$)/.test(String(cacheStatus?.[1] ?? ''))) t.l1++;
    },
  };
  return { request, tally };
}

/** Polls the table's stats until `flights` and `mailbox_depth` are 0, or 2 s pass. */
async function settle(url: string, table: string) {
  const started = performance.now();
  for (;;) {
    const body = (await (await fetch(`${url}/v1/tables`)).json()) as {
      tables: Array<{ name: string; stats: { flights: number; mailbox_depth: number } }>;
    };
    const stats = body.tables.find((x) => x.name === table)?.stats;
    if (stats === undefined) throw new Error(`GET /v1/tables does not list ${table}`);
    const settledMs = Math.round(performance.now() - started);
    const rest = stats.flights === 0 && stats.mailbox_depth === 0;
    if (rest || settledMs >= 2_000) return { ...stats, settledMs };
    await sleep(100);
  }
}

runDrill('soak', args.json, async () => {
  const tag = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  const table = `soak-${tag}`;
  let service: Service | undefined;
  // Bounded: startup, warm-up, the run, the settle and the shutdown fit well within this.
  const giveUp = () => {
    process.stderr.write(`soak drill: still running after ${seconds + 120} s; giving up\n`);
    process.exit(2);
  };
  const watchdog = setTimeout(giveUp, (seconds + 120) * 1000);
  const redis = await connectAdmin(args.valkey);
  try {
    return await withOrigin([args['latency-ms']], async (origin) => {
      // The drill exercises open writes; an inherited token would turn every PUT and DELETE into a 401.
      delete process.env.ECHOSTORE_ADMIN_TOKEN;
      // Bytes bind, not rows: the cold ids fill L1 to its byte bound, and the run shows it stays there.
      const l1 = { maxBytes: L1_BYTES, maxEntries: 10_000_000 };
      const policy = { maxConcurrentLoads: MAX_CONCURRENT_LOADS, l1 };
      const warn = { log: { level: 'warn' } };
      const config = originConfig({ url: args.valkey }, table, origin.template, policy, warn);
      service = await startService(config);
      const url = service.url;
      // Every hot id read once (32 at a time at most), so the run starts with them in L1.
      const hotIds = Array.from({ length: args['hot-ids'] }, (_, i) => `hot-${i}`);
      const warm = await readItems(url, table, hotIds, Math.min(connections, 32));
      const failed = warm.find((r) => r.status !== 200);
      if (failed) throw new Error(`warm-up GET ${failed.id} answered ${failed.status}`);
      const readsBefore = origin.totalReads();
      const started = performance.now();
      const samples = [await memory(url, table, 0)];
      const sample = () => memory(url, table, Math.round((performance.now() - started) / 1000));
      const keep = (m: Memory) => samples.push(m);
      const sampler = setInterval(() => sample().then(keep, () => {}), 5_000);
      const { request, tally } = mixedLoad(table, tag);
      const failures: Record<string, number> = {};
      // Every request must be answered within 10 s (autocannon counts a timeout otherwise).
      const options = { url, connections, duration: seconds, timeout: 10, requests: [request] };
      const result = await new Promise<autocannon.Result>((ok, fail) => {
        const run = autocannon(options, (err, r) => (err ? fail(err) : ok(r)));
        run.on('reqError', (err: Error) => bump(failures, errorCode(err) ?? err.message));
      });
      clearInterval(sampler);
      const atRest = await settle(url, table);
      samples.push(await sample());
      const m = await scrape(url);
      const load = (what: string) =>
        metric(m, `echostore_load_duration_seconds_${what}`, { table }) ?? 0;

      // With pipelining 1 each connection has exactly one request in flight when autocannon stops.
      const unanswered = result.requests.sent - tally.responses - connections;
      const lost = Math.max(0, unanswered - result.errors);
      const bad5xx = Object.entries(tally.errorCodes).filter(
        ([k]) => k.startsWith('5') && !k.endsWith(' ECC_SHED'),
      );
      const [start, end] = [samples[0] as Memory, samples.at(-1) as Memory];
      const peak = Math.max(...samples.map((s) => s.rss));
      const growth = round(end.rss / start.rss);
      const flat = flatness(samples);
      const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;
      const signed = (x: number) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(1)} %`;
      const hot = tally.byKind['hot GET'];
      const errors = result.errors - result.timeouts;
      const requestFailures =
        Object.keys(failures).length > 0 ? ` ${JSON.stringify(failures)}` : '';
      const failedSeen = `${result.timeouts} / ${errors} / ${lost}${requestFailures}`;
      const answeredAll = result.timeouts + errors + lost === 0;
      const rest = `${atRest.flights} / ${atRest.mailbox_depth} after ${atRest.settledMs} ms`;
      const idle = atRest.flights === 0 && atRest.mailbox_depth === 0;
      const kinds = KINDS.map((k) => {
        const { ms, statuses } = tally.byKind[k];
        const row = [k, `${WEIGHTS[k] * 100}%`, ms.length, listCounts(statuses, '')];
        return [...row, ...Object.values(p50p99(ms))];
      });
      return {
        title: `soak drill: ${seconds} s, ${connections} connections, ${args['hot-ids']} hot ids, source latency ${args['latency-ms']} ms, maxConcurrentLoads ${MAX_CONCURRENT_LOADS}`,
        body: [columns(kinds, ['request', 'share', 'responses', 'statuses', 'p50 ms', 'p99 ms'])],
        figures: {
          throughput: `${Math.round(tally.responses / result.duration).toLocaleString('en-US')} req/s`,
          'latency p50 / p99': `${Object.values(p50p99(KINDS.flatMap((k) => tally.byKind[k].ms))).join(' / ')} ms`,
          'hot GETs answered by L1': `${((hot.l1 / Math.max(1, hot.statuses['200'] ?? 0)) * 100).toFixed(1)}%`,
          'source reads (loader mean, seen by the service)': `${origin.totalReads() - readsBefore} (${round((load('sum') * 1000) / Math.max(1, load('count')))} ms)`,
          'error codes (non-2xx)': listCounts(tally.errorCodes, 'none'),
          'heap after GC start / end': `${mb(start.heapAfterGc)} / ${mb(end.heapAfterGc)}   (L1 bound ${mb(L1_BYTES)})`,
        },
        memory: samples,
        checks: [
          law('5xx other than ECC_SHED', listCounts(Object.fromEntries(bad5xx), 'none'), 'none'),
          law('timeouts / errors / unanswered', failedSeen, '0 / 0 / 0', answeredAll),
          law('at rest: flights / mailbox_depth', rest, '0 / 0', idle),
          law(
            'RSS start / peak / end',
            `${mb(start.rss)} / ${mb(peak)} / ${mb(end.rss)} (×${growth})`,
            `end ≤ ×${MAX_RSS_GROWTH} start`,
            growth <= MAX_RSS_GROWTH,
          ),
          check(
            `with L1 full: RSS / heap after GC (medians), first minute → last, within ±${FLAT_TOLERANCE * 100} %`,
            !flat.judged || flat.pass,
            flat.fullAtS === undefined
              ? 'L1 never full: not judged'
              : !flat.judged || !flat.first || !flat.last
                ? `L1 full at ${flat.fullAtS} s; not judged (judged from ${SETTLE_S} s later, for at least half the run)`
                : `${mb(flat.first.rss)} / ${mb(flat.first.heap)} from ${flat.fromS} s → ${mb(flat.last.rss)} / ${mb(flat.last.heap)} (${signed(flat.rssChange)} / ${signed(flat.heapChange)})`,
          ),
        ],
      };
    });
  } finally {
    clearTimeout(watchdog);
    await service?.stop();
    if (redis.status === 'ready') await dropTable(redis, table).catch(() => 0);
    redis.disconnect();
  }
});
