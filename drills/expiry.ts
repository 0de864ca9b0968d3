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
import { type Origin, startOrigin } from '../harness/origin.js';
import type { ExpiryPolicy, Go, Setup, WorkerResult } from './expiry-worker.js';
import { drillArgs, float, int, runDrill, valkeyOption } from './lib/cli.js';
import { type ExpiryPlan, judgeExpiry, renderExpiry } from './lib/expiry-report.js';
import { Reaper } from './lib/reaper.js';
import { connectAdmin, dropId, layerOf, loaded, originStore } from './lib/store.js';
import { runWorkers } from './lib/workers.js';

const args = drillArgs({
  instances: int(3, 2, 16),
  clients: int(50, 1, 1_000),
  expiries: int(4, 1, 20),
  'ttl-ms': int(1500, 200, 60_000),
  'stale-ms': int(3000, 0, 600_000),
  beta: float(0, 0, 100),
  'latency-ms': int(100, 1, 2_000),
  'pause-ms': int(1, 0, 1_000),
  valkey: valkeyOption(),
});

const WORKER = resolve(dirname(fileURLToPath(import.meta.url)), 'expiry-worker.js');
const TABLE = 'expiry';
/** Lead time between `go` and the first read, so every instance starts together. */
const GO_LEAD_MS = 100;
/** Beyond the run: a last read may wait `waitTimeoutMs` (5 s), then the store closes (≤ 5 s). */
const RESULT_GRACE_MS = 30_000;

/** One source read through a short-lived store of the same policy: the value every expiry starts from. */
async function warm(origin: Origin, policy: ExpiryPolicy, id: string): Promise<number> {
  const { store, close } = await originStore(args.valkey, TABLE, origin.template, policy);
  try {
    const r = await store.table(TABLE).get(id);
    if (!loaded(r)) throw new Error(`warm-up answered from ${layerOf(r)}, not the source`);
  } finally {
    await close();
  }
  const first = origin.readsLog(id)[0]?.answeredAtMs;
  if (first === undefined) throw new Error('the warm-up read never reached the origin');
  return first;
}

async function main() {
  const plan: ExpiryPlan = {
    instances: args.instances,
    clients: args.clients,
    expiries: args.expiries,
    ttlMs: args['ttl-ms'],
    staleMs: args['stale-ms'],
    beta: args.beta,
    latencyMs: args['latency-ms'],
    pauseMs: args['pause-ms'],
  };
  const policy: ExpiryPolicy = {
    ttlMs: plan.ttlMs,
    staleMs: plan.staleMs,
    jitter: 0,
    earlyRefreshBeta: plan.beta,
    l1: { ttlMs: 60_000 },
  };
  const id = `expiry-${Date.now()}-${randomBytes(6).toString('hex')}`;
  const admin = await connectAdmin(args.valkey);
  const origin = await startOrigin(plan.latencyMs);
  const reaper = new Reaper();
  // Set when the warm-up fill lands: the epoch ms of the fill, of the clients' stop, and the run's length.
  let [t0Ms, stopAtMs, runMs] = [0, 0, 0];
  try {
    await dropId(admin, TABLE, id);
    const setup: Setup = {
      kind: 'setup',
      table: TABLE,
      id,
      template: origin.template,
      valkey: args.valkey,
      policy,
      clients: plan.clients,
      pauseMs: plan.pauseMs,
      waitedAtMs: plan.latencyMs,
    };
    const go = async () => {
      t0Ms = await warm(origin, policy, id);
      stopAtMs = t0Ms + (plan.expiries + 0.5) * plan.ttlMs;
      const atMs = Date.now() + GO_LEAD_MS;
      runMs = stopAtMs - atMs;
      const message: Go = { kind: 'go', atMs, stopAtMs };
      return { message, resultWithinMs: stopAtMs - Date.now() + RESULT_GRACE_MS };
    };
    const setups = Array.from({ length: plan.instances }, () => setup);
    const results = await runWorkers<WorkerResult>(WORKER, setups, go, reaper);
    return judgeExpiry(plan, origin.readsLog(id), results, t0Ms, stopAtMs, runMs);
  } finally {
    reaper.killAll();
    await dropId(admin, TABLE, id).catch(() => {});
    admin.disconnect();
    await origin.close();
  }
}

runDrill('expiry', args.json, main, renderExpiry);
