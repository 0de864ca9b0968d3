/**
 * Expiry drill: one hot key read back to back by every instance while its soft TTL runs out
 * → at most one source read per expiry, and (stale on) no reader waits on the loader. The parent
 * warms the key; the workers read until (expiries + 0.5) × ttlMs after that fill. Usage and laws:
 * drills/README.md#expiry.
 */
import { randomBytes } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Origin, startOrigin } from '../harness/origin.js';
import type { ExpiryGo, ExpiryPolicy, Setup, WorkerResult } from './expiry-worker.js';
import { drillArgs, float, int, runDrill, valkeyOption } from './lib/cli.js';
import { type ExpiryPlan, judgeExpiry, renderExpiry } from './lib/expiry-report.js';
import { Reaper } from './lib/reaper.js';
import { connectAdmin, dropId, originStore } from './lib/store.js';
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
    if (r.layer !== 'origin') throw new Error(`warm-up answered from ${r.layer}, not the source`);
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
      const message: ExpiryGo = { kind: 'go', atEpochMs: atMs, stopAtMs };
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
