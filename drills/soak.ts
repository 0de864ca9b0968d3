/**
 * Soak drill: mixed load through the real service over HTTP for a bounded
 * time, then checks that nothing failed, nothing is left in flight at rest and
 * memory stayed bounded.
 *
 *   npm run soak -- [--seconds 120] [--connections 32] [--hot-ids 1000]
 *     [--latency-ms 5] [--json [file]]
 *
 * One service instance (`dist/src/main.js`, no admin token) with one table on
 * an `http` source (an origin started here, `--latency-ms` per read) and
 * `maxConcurrentLoads: 32`. The hot ids are warmed first; then autocannon
 * drives `--connections` keep-alive connections, each request drawn at random:
 * 70% GET of a hot id (L1 hits, except after a DELETE), 20% GET of a new cold
 * id (a miss: one source read), 5% PUT of a hot id (JSON body), 5% DELETE of a
 * hot id.
 *
 * Needs a live Valkey/Redis at `--valkey` or `VALKEY_URL` (default
 * redis://127.0.0.1:6379); the run's keys are deleted at the end. Exits 1 when
 * a 5xx other than `ECC_SHED` appears, a request timed out, errored or went
 * unanswered, `flights` or `mailbox_depth` is not 0 at rest, or RSS grew more
 * than {@link MAX_RSS_GROWTH}×; 2 when the drill cannot run.
 */
import { randomBytes } from 'node:crypto';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { type Origin, startOrigin } from '../harness/origin.js';
import { redactUrl } from '../src/valkey.js';
import { drillArgs } from './lib/args.js';
import { hotId, itemPath, type Kind, mixedLoad } from './lib/mix.js';
import { type Service, scrape, startService } from './lib/service.js';
import { type AtRest, printSoak, soakReport } from './lib/soak-report.js';

const args = drillArgs({
  seconds: { type: 'string', default: '120' },
  connections: { type: 'string', default: '32' },
  'hot-ids': { type: 'string', default: '1000' },
  'latency-ms': { type: 'string', default: '5' },
  valkey: { type: 'string', default: process.env.VALKEY_URL ?? 'redis://127.0.0.1:6379' },
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

/** The value of an unlabelled sample (e.g. `process_resident_memory_bytes`) in `<url>/metrics`. */
async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  if (line === undefined) throw new Error(`${url}/metrics has no ${name}`);
  return Number(line.slice(name.length + 1));
}

/** The stats of `name` from `GET /v1/tables`. */
async function tableStats(url: string, name: string): Promise<AtRest> {
  const res = await fetch(`${url}/v1/tables`);
  const body = (await res.json()) as {
    tables: Array<{ name: string; stats: AtRest }>;
  };
  const t = body.tables.find((x) => x.name === name);
  if (t === undefined) throw new Error(`GET /v1/tables does not list ${name}`);
  return t.stats;
}

/** GETs every hot id once (`concurrency` at a time), so the run starts with them in L1. */
async function warm(url: string, tableName: string, hotIds: number, concurrency: number) {
  let next = 0;
  const worker = async () => {
    while (next < hotIds) {
      const id = hotId(next++);
      const res = await fetch(url + itemPath(tableName, id));
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`warm-up GET ${id} answered ${res.status}`);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

/** Polls the table's stats until `flights` and `mailbox_depth` are 0, or `SETTLE_MS` passes. */
async function settle(url: string, tableName: string) {
  const started = performance.now();
  for (;;) {
    const stats = await tableStats(url, tableName);
    const waitedMs = Math.round(performance.now() - started);
    if ((stats.flights === 0 && stats.mailbox_depth === 0) || waitedMs >= SETTLE_MS) {
      return { stats, waitedMs };
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Runs autocannon; failed requests (timeouts, connection errors) are counted by reason. */
function runLoad(opts: autocannon.Options) {
  const failures = new Map<string, number>();
  return new Promise<{ result: autocannon.Result; failures: Map<string, number> }>((ok, fail) => {
    const instance = autocannon(opts, (err, result) =>
      err ? fail(err) : ok({ result, failures }),
    );
    instance.on('reqError', (err: { code?: string; message?: string }) => {
      const reason = err?.code ?? err?.message ?? String(err);
      failures.set(reason, (failures.get(reason) ?? 0) + 1);
    });
  });
}

/** Deletes every key of `tableName` (`ecc:<table>:*`). */
async function dropKeys(redis: Redis, tableName: string): Promise<number> {
  let dropped = 0;
  const stream = redis.scanStream({ match: `ecc:${tableName}:*`, count: 1000 });
  for await (const keys of stream as AsyncIterable<string[]>) {
    if (keys.length > 0) dropped += await redis.unlink(...keys);
  }
  return dropped;
}

async function main(): Promise<number> {
  const seconds = Number(args.seconds);
  const connections = Number(args.connections);
  const hotIds = Number(args['hot-ids']);
  const latencyMs = Number(args['latency-ms']);
  for (const [name, v] of [
    ['--seconds', seconds],
    ['--connections', connections],
    ['--hot-ids', hotIds],
  ] as const) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a positive integer`);
  }
  if (!Number.isFinite(latencyMs) || latencyMs < 0) {
    throw new Error('--latency-ms must be a non-negative number');
  }
  const valkey = args.valkey as string;
  const tag = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  const tableName = `soak-${tag}`;

  let service: Service | undefined;
  let origin: Origin | undefined;
  // Bounded: startup, warm-up, the run, the settle and the shutdown fit well within this.
  const watchdog = setTimeout(
    () => {
      process.stderr.write(`soak drill: still running after ${seconds + 120} s; giving up\n`);
      service?.process.kill('SIGKILL');
      process.exit(2);
    },
    (seconds + 120) * 1000,
  );
  const onSignal = () => {
    service?.process.kill('SIGKILL');
    process.exit(2);
  };
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);

  const redis = new Redis(valkey, {
    maxRetriesPerRequest: 1,
    connectTimeout: 3_000,
    lazyConnect: true,
    retryStrategy: () => null,
  });
  let lastRedisError: unknown;
  redis.on('error', (err) => {
    lastRedisError = err;
  });
  try {
    await redis.connect().catch((err: unknown) => {
      const reason = (lastRedisError ?? err) as Error;
      throw new Error(`no Valkey/Redis at ${redactUrl(valkey)}: ${reason.message}`);
    });
    origin = await startOrigin(latencyMs);
    // The drill exercises open writes; an inherited token would turn every PUT and DELETE into a 401.
    delete process.env.ECHOSTORE_ADMIN_TOKEN;
    service = await startService({
      valkey: { url: valkey },
      log: { level: 'warn' },
      tables: {
        [tableName]: {
          source: { kind: 'http', url: origin.template },
          maxConcurrentLoads: MAX_CONCURRENT_LOADS,
        },
      },
    });
    const ready = (await (await fetch(`${service.url}/readyz`)).json()) as { status?: string };
    if (ready.status !== 'ready') throw new Error(`the service is ${ready.status}, not ready`);
    await warm(service.url, tableName, hotIds, Math.min(connections, 32));
    const readsBefore = origin.totalReads();

    const rssStart = await metric(service.url, 'process_resident_memory_bytes');
    const rssSamples = [rssStart];
    const svcUrl = service.url;
    const sampler = setInterval(() => {
      metric(svcUrl, 'process_resident_memory_bytes').then(
        (v) => rssSamples.push(v),
        () => {},
      );
    }, RSS_SAMPLE_MS);
    const { request, tally } = mixedLoad({ table: tableName, hotIds, tag, weights: WEIGHTS });
    const { result, failures } = await runLoad({
      url: service.url,
      connections,
      duration: seconds,
      timeout: REQUEST_TIMEOUT_S,
      requests: [request],
    });
    clearInterval(sampler);

    const { stats, waitedMs } = await settle(service.url, tableName);
    const rssEnd = await metric(service.url, 'process_resident_memory_bytes');
    rssSamples.push(rssEnd);
    const label = { table: tableName };
    const loadSeconds = await scrape(service.url, 'echostore_load_duration_seconds_sum', label);
    const loads = await scrape(service.url, 'echostore_load_duration_seconds_count', label);
    const report = soakReport({
      weights: WEIGHTS,
      maxConcurrentLoads: MAX_CONCURRENT_LOADS,
      maxRssGrowth: MAX_RSS_GROWTH,
      seconds,
      connections,
      hotIds,
      latencyMs,
      result,
      failures,
      tally,
      stats,
      waitedMs,
      rssStart,
      rssEnd,
      rssSamples,
      sourceReads: origin.totalReads() - readsBefore,
      loaderMeanMs: (loadSeconds * 1000) / Math.max(1, loads),
    });
    printSoak(report, tally, args.json);
    return report.pass ? 0 : 1;
  } finally {
    clearTimeout(watchdog);
    await service?.stop();
    await origin?.close();
    if (redis.status === 'ready') await dropKeys(redis, tableName).catch(() => 0);
    redis.disconnect();
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`soak drill failed to run: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(2);
  },
);
