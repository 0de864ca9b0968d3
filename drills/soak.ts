/**
 * Soak drill: mixed load (autocannon) through one service for a bounded time → no 5xx but
 * `ECC_SHED`, nothing unanswered, nothing in flight at rest, memory bounded and flat with L1 full.
 * Usage and laws: drills/README.md#soak.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import type { Redis } from 'ioredis';
import { metric, scrape } from '../harness/metrics.js';
import { type Origin, startOrigin } from '../harness/origin.js';
import { type Service, startService } from '../harness/service.js';
import { drillArgs, float, int, runDrill, valkeyOption } from './lib/cli.js';
import { errorCode, readItems } from './lib/http.js';
import { hotId, type Kind, mixedLoad } from './lib/mix.js';
import { Reaper } from './lib/reaper.js';
import { bump } from './lib/report.js';
import { type AtRest, type MemorySample, renderSoak, soakReport } from './lib/soak-report.js';
import { connectAdmin, dropTable, originConfig } from './lib/store.js';

const args = drillArgs({
  seconds: int(120, 1),
  connections: int(32, 1),
  'hot-ids': int(1000, 1),
  'latency-ms': float(5, 0),
  'l1-mib': int(16, 1),
  valkey: valkeyOption(),
});

const WEIGHTS: Record<Kind, number> = {
  'hot GET': 0.7,
  'cold GET': 0.2,
  PUT: 0.05,
  DELETE: 0.05,
};
const MAX_CONCURRENT_LOADS = 32;
/**
 * RSS at the end may be at most this multiple of RSS at the start (after
 * warm-up, idle). Generous on purpose: under load V8 grows its heap to a
 * working size and GC timing decides when it shrinks, L1 fills to its bound
 * (10,000 entries of ~100-byte values: a few MB) and sockets hold buffers, so
 * a healthy process ends well above its idle size. What 3× still catches is
 * memory that grows with the request count (retained flights or waiters, an
 * unbounded map of ids: the 20% cold ids are tens of thousands of distinct ids
 * per minute). A slow leak passes; read the peak and the samples for a trend.
 */
const MAX_RSS_GROWTH = 3;
/** The longest wait for `flights` and `mailbox_depth` to reach 0 after the load stops. */
const SETTLE_MS = 2_000;
/** Every request must be answered within this (autocannon counts a timeout otherwise). */
const REQUEST_TIMEOUT_S = 10;
const RSS_SAMPLE_MS = 5_000;

/** The service's memory from its `/metrics`: RSS, heap after the latest full GC, L1 bytes, bytes. */
async function memory(url: string, table: string): Promise<MemorySample> {
  const samples = await scrape(url);
  const rss = metric(samples, 'process_resident_memory_bytes');
  const heapAfterGc = metric(samples, 'nodejs_heap_after_gc_bytes');
  if (rss === undefined || heapAfterGc === undefined) {
    throw new Error(
      `${url}/metrics lacks process_resident_memory_bytes or nodejs_heap_after_gc_bytes`,
    );
  }
  const l1Bytes = metric(samples, 'echostore_l1_bytes', { table }) ?? 0;
  return { atS: 0, rss, heapAfterGc, l1Bytes };
}

/** GETs every hot id once (`concurrency` at a time), so the run starts with them in L1. */
async function warm(url: string, table: string, concurrency: number) {
  const ids = Array.from({ length: args['hot-ids'] }, (_, i) => hotId(i));
  const failed = (await readItems(url, table, ids, concurrency)).find((r) => r.status !== 200);
  if (failed) throw new Error(`warm-up GET ${failed.id} answered ${failed.status}`);
}

/** Polls the table's stats until `flights` and `mailbox_depth` are 0, or `SETTLE_MS` passes. */
async function settle(url: string, table: string) {
  const started = performance.now();
  for (;;) {
    const body = (await (await fetch(`${url}/v1/tables`)).json()) as {
      tables: Array<{ name: string; stats: AtRest }>;
    };
    const stats = body.tables.find((x) => x.name === table)?.stats;
    if (stats === undefined) throw new Error(`GET /v1/tables does not list ${table}`);
    const waitedMs = Math.round(performance.now() - started);
    if ((stats.flights === 0 && stats.mailbox_depth === 0) || waitedMs >= SETTLE_MS) {
      return { stats, waitedMs };
    }
    await sleep(100);
  }
}

/** Runs autocannon; failed requests (timeouts, connection errors) are counted by reason. */
function runLoad(opts: autocannon.Options) {
  const failures: Record<string, number> = {};
  return new Promise<{ result: autocannon.Result; failures: Record<string, number> }>(
    (ok, fail) => {
      const instance = autocannon(opts, (err, result) =>
        err ? fail(err) : ok({ result, failures }),
      );
      instance.on('reqError', (err: Error) => bump(failures, errorCode(err) ?? err.message));
    },
  );
}

async function main() {
  const { seconds, connections, valkey } = args;
  const tag = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  const table = `soak-${tag}`;
  let service: Service | undefined;
  let origin: Origin | undefined;
  const reaper = new Reaper(); // the service dies with the drill, however it ends
  // Bounded: startup, warm-up, the run, the settle and the shutdown fit well within this.
  const watchdog = setTimeout(
    () => {
      process.stderr.write(`soak drill: still running after ${seconds + 120} s; giving up\n`);
      process.exit(2);
    },
    (seconds + 120) * 1000,
  );
  let redis: Redis | undefined;
  try {
    redis = await connectAdmin(valkey);
    origin = await startOrigin(args['latency-ms']);
    // The drill exercises open writes; an inherited token would turn every PUT and DELETE into a 401.
    delete process.env.ECHOSTORE_ADMIN_TOKEN;
    const policy = {
      maxConcurrentLoads: MAX_CONCURRENT_LOADS,
      // Bytes bind, not rows: the cold ids fill L1 to its byte bound, and the run shows it stays there.
      l1: { maxBytes: args['l1-mib'] * 2 ** 20, maxEntries: 10_000_000 },
    };
    const warn = { log: { level: 'warn' } };
    service = await startService(
      originConfig({ url: valkey }, table, origin.template, policy, warn),
    );
    reaper.track(service.process);
    const url = service.url;
    const ready = (await (await fetch(`${url}/readyz`)).json()) as { status?: string };
    if (ready.status !== 'ready') throw new Error(`the service is ${ready.status}, not ready`);
    await warm(url, table, Math.min(connections, 32));
    const readsBefore = origin.totalReads();

    const started = performance.now();
    const sampleNow = async () => ({
      ...(await memory(url, table)),
      atS: Math.round((performance.now() - started) / 1000),
    });
    const first = await sampleNow();
    const rssStart = first.rss;
    const rssSamples = [rssStart];
    const memorySamples = [first];
    const sampler = setInterval(() => {
      sampleNow().then(
        (m) => {
          rssSamples.push(m.rss);
          memorySamples.push(m);
        },
        () => {},
      );
    }, RSS_SAMPLE_MS);
    const hotIds = args['hot-ids'];
    const { request, tally } = mixedLoad({ table, hotIds, tag, weights: WEIGHTS });
    const { result, failures } = await runLoad({
      url,
      connections,
      duration: seconds,
      timeout: REQUEST_TIMEOUT_S,
      requests: [request],
    });
    clearInterval(sampler);

    const { stats, waitedMs } = await settle(url, table);
    const last = await sampleNow();
    const rssEnd = last.rss;
    rssSamples.push(rssEnd);
    memorySamples.push(last);
    const samples = await scrape(url);
    const load = (what: string) =>
      metric(samples, `echostore_load_duration_seconds_${what}`, { table }) ?? 0;
    return soakReport({
      weights: WEIGHTS,
      maxConcurrentLoads: MAX_CONCURRENT_LOADS,
      maxRssGrowth: MAX_RSS_GROWTH,
      seconds,
      connections,
      hotIds,
      latencyMs: args['latency-ms'],
      result,
      failures,
      tally,
      stats,
      waitedMs,
      rssStart,
      rssEnd,
      rssSamples,
      memorySamples,
      l1MaxBytes: args['l1-mib'] * 2 ** 20,
      sourceReads: origin.totalReads() - readsBefore,
      loaderMeanMs: (load('sum') * 1000) / Math.max(1, load('count')),
    });
  } finally {
    clearTimeout(watchdog);
    await service?.stop();
    await origin?.close();
    if (redis?.status === 'ready') await dropTable(redis, table).catch(() => 0);
    redis?.disconnect();
  }
}

runDrill('soak', args.json, main, renderSoak);
