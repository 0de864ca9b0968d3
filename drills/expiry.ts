/**
 * Expiry drill: one hot key, read back to back by `--clients` loops in each of
 * `--instances` real processes, while its soft TTL runs out `--expiries` times.
 *
 *   npm run drill:expiry -- [--instances 3] [--clients 50] [--expiries 4]
 *     [--ttl-ms 1500] [--stale-ms 3000] [--beta 0] [--latency-ms 100]
 *     [--pause-ms 1] [--json [file]]
 *
 * XFetch is off by default (`--beta 0`) so the TTL really runs out and the
 * stale path is what is judged; `--beta 1` shows XFetch replacing the value
 * before it goes stale instead (at this read rate, about a second early).
 *
 * Policy: `ttlMs`, `staleMs`, `earlyRefreshBeta` as given, `jitter: 0`,
 * `l1.ttlMs: 60000` (so L1 rows live until their hard TTL). The parent warms
 * the key once, then the clients run for (expiries + 0.5) × ttlMs from that
 * fill. Law, per expiry across the fleet: at most one source read (counted by
 * the origin, which stamps each read) and, with `staleMs` > 0, no read waited
 * on the loader: a stale read answers at once and starts one background
 * refresh, and XFetch may refresh before the expiry. A read *waited* when its
 * answer came from the source for that caller or took at least the source's
 * latency. `--stale-ms 0` shows the contrast: waits are reported, not judged.
 *
 * Needs a live Valkey/Redis at `--valkey` or `VALKEY_URL` (default
 * redis://127.0.0.1:6379); the run's keys are deleted at the end. Exits 1 when
 * the law is broken or a read failed, 2 when the drill cannot run.
 */
import { randomBytes } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { type Origin, startOrigin } from '../harness/origin.js';
import { httpSource } from '../src/sources/http.js';
import { leaseKey, valueKey } from '../src/store/keys.js';
import { createStore } from '../src/store/store.js';
import type { ExpiryPolicy, FromWorker, Setup, ToWorker, WorkerResult } from './expiry-worker.js';
import { drillArgs, emitJson } from './lib/args.js';
import { type ExpiryPlan, judgeExpiry, renderExpiry } from './lib/expiry-report.js';
import { Reaper } from './lib/reaper.js';
import { spawnWorker, within } from './lib/workers.js';

const args = drillArgs({
  instances: { type: 'string', default: '3' },
  clients: { type: 'string', default: '50' },
  expiries: { type: 'string', default: '4' },
  'ttl-ms': { type: 'string', default: '1500' },
  'stale-ms': { type: 'string', default: '3000' },
  beta: { type: 'string', default: '0' },
  'latency-ms': { type: 'string', default: '100' },
  'pause-ms': { type: 'string', default: '1' },
  valkey: { type: 'string', default: process.env.VALKEY_URL ?? 'redis://127.0.0.1:6379' },
});

const WORKER = resolve(dirname(fileURLToPath(import.meta.url)), 'expiry-worker.js');
const TABLE = 'expiry';
/** Lead time between `go` and the first read, so every instance starts together. */
const GO_LEAD_MS = 100;
const READY_TIMEOUT_MS = 20_000;
/** Beyond the run: a last read may wait `waitTimeoutMs` (5 s), then the store closes (≤ 5 s). */
const RESULT_GRACE_MS = 30_000;
const EXIT_TIMEOUT_MS = 10_000;

/** A forked worker and the promises of what it reports. */

function numberArg(name: string, min: number, max: number, integer = true): number {
  const n = Number(args[name as keyof typeof args]);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    throw new Error(
      `--${name} must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}`,
    );
  }
  return n;
}

/** One source read through a short-lived store of the same policy: the value every expiry starts from. */
async function warm(valkey: string, origin: Origin, policy: ExpiryPolicy, id: string) {
  const source = httpSource({ url: origin.template, timeoutMs: 10_000 });
  const store = await createStore({
    valkey,
    tables: { [TABLE]: { load: source.load, ...policy } },
  });
  try {
    const r = await store.table(TABLE).get(id);
    if (r.source !== 'source') throw new Error(`warm-up answered from ${r.source}, not the source`);
  } finally {
    await store.close();
    source.close();
  }
  const first = origin.readsLog(id)[0]?.answeredAtMs;
  if (first === undefined) throw new Error('the warm-up read never reached the origin');
  return first;
}

async function main(): Promise<number> {
  const plan: ExpiryPlan = {
    instances: numberArg('instances', 2, 16),
    clients: numberArg('clients', 1, 1_000),
    expiries: numberArg('expiries', 1, 20),
    ttlMs: numberArg('ttl-ms', 200, 60_000),
    staleMs: numberArg('stale-ms', 0, 600_000),
    beta: numberArg('beta', 0, 100, false),
    latencyMs: numberArg('latency-ms', 1, 2_000),
    pauseMs: numberArg('pause-ms', 0, 1_000),
  };
  const valkey = args.valkey as string;
  const policy: ExpiryPolicy = {
    ttlMs: plan.ttlMs,
    staleMs: plan.staleMs,
    jitter: 0,
    earlyRefreshBeta: plan.beta,
    l1: { ttlMs: 60_000 },
  };
  const id = `expiry-${Date.now()}-${randomBytes(6).toString('hex')}`;
  const keys = [valueKey(TABLE, id), leaseKey(TABLE, id)];
  const admin = new Redis(valkey, {
    maxRetriesPerRequest: 1,
    connectTimeout: 3_000,
    lazyConnect: true,
  });
  admin.on('error', () => {});
  await admin.connect().catch((err: unknown) => {
    throw new Error(`cannot reach Valkey at ${valkey}`, { cause: err });
  });
  const origin = await startOrigin(plan.latencyMs);
  const reaper = new Reaper();
  let results: WorkerResult[];
  let t0Ms: number;
  let stopAtMs: number;
  let runMs: number;
  try {
    await admin.del(...keys);
    const setup: Setup = {
      kind: 'setup',
      table: TABLE,
      id,
      template: origin.template,
      valkey,
      policy,
      clients: plan.clients,
      pauseMs: plan.pauseMs,
      waitedAtMs: plan.latencyMs,
    };
    const workers = Array.from({ length: plan.instances }, () =>
      spawnWorker<FromWorker>(WORKER, setup satisfies ToWorker, reaper),
    );
    try {
      await within(Promise.all(workers.map((w) => w.ready)), READY_TIMEOUT_MS, 'workers ready');
      t0Ms = await warm(valkey, origin, policy, id);
      stopAtMs = t0Ms + (plan.expiries + 0.5) * plan.ttlMs;
      const atMs = Date.now() + GO_LEAD_MS;
      runMs = stopAtMs - atMs;
      for (const w of workers) w.child.send({ kind: 'go', atMs, stopAtMs } satisfies ToWorker);
      results = await within(
        Promise.all(workers.map((w) => w.result)),
        stopAtMs - Date.now() + RESULT_GRACE_MS,
        'workers result',
      );
      await within(Promise.all(workers.map((w) => w.exited)), EXIT_TIMEOUT_MS, 'workers exit');
    } finally {
      reaper.killAll();
    }
  } finally {
    await admin.del(...keys).catch(() => {});
    admin.disconnect();
    await origin.close();
  }

  const report = judgeExpiry(plan, origin.readsLog(id), results, t0Ms, stopAtMs, runMs);
  if (!emitJson(args.json, report)) process.stdout.write(renderExpiry(report));
  return report.pass ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`expiry drill failed to run: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(2);
  },
);
