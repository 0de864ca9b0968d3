/**
 * Fault drill: two real service instances under steady load while Valkey is
 * killed, paused, and while a lease holder dies mid-load.
 *
 *   npm run drill:faults -- [--loops 20] [--pause-ms 20] [--latency-ms 20] [--hot 20] [--json [file]]
 *
 * Starts everything it uses on 127.0.0.1: its own redis-server/valkey-server
 * (free port, no persistence), an origin that counts its own reads and can hold
 * `hold-` ids open, and two services (`dist/src/main.js`). Phases:
 *
 *   1 baseline (3 s)
 *   2 Valkey SIGKILLed for 10 s, restarted on the same port, 5 s more
 *   3 Valkey SIGSTOPped for 5 s, SIGCONT, 3 s more
 *   4 instance A dies holding a lease: 50 readers of the id on B are answered
 *     by one takeover after `leaseMs`; the origin counts exactly 2 reads of it
 *
 * Laws: L1 hits never fail; no request waits past waitTimeoutMs +
 * loadTimeoutMs + commandTimeoutMs + 1 s; after phases 2 and 3 both instances
 * report `/readyz` "ready" within 5 s without a restart, and a PUT then GET
 * round-trips through Valkey; phase 4 as above. Exits 1 when a law does not
 * hold, 2 when the drill cannot run.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { HOLD_PREFIX, type Origin, startOrigin } from '../harness/origin.js';
import { spawnValkey, type ValkeyServer } from '../harness/valkey-server.js';
import { drillArgs, emitJson } from './lib/args.js';
import { type Check, type PhaseRow, phaseRow, renderFaults } from './lib/fault-report.js';
import { itemUrl, LoadGenerator, type Sample, type Target, timedGet } from './lib/load.js';
import { Reaper } from './lib/reaper.js';
import { type Recovery, readyAgain, recovery } from './lib/recovery.js';
import { type Service, scrape, startService } from './lib/service.js';

const args = drillArgs({
  loops: { type: 'string', default: '20' },
  'pause-ms': { type: 'string', default: '20' },
  'latency-ms': { type: 'string', default: '20' },
  hot: { type: 'string', default: '20' },
});

const TABLE = 'faults';
const VALKEY = { commandTimeoutMs: 500, connectTimeoutMs: 1_000 };
const POLICY = {
  ttlMs: 600_000,
  l1: { ttlMs: 600_000 },
  loadTimeoutMs: 2_000,
  leaseMs: 3_000,
  waitTimeoutMs: 4_000,
  maxConcurrentLoads: 64,
};
/** The longest a request may lawfully take: wait, then load, then one timed-out command, plus 1 s margin. */
const BOUND_MS = POLICY.waitTimeoutMs + POLICY.loadTimeoutMs + VALKEY.commandTimeoutMs + 1_000;
const REQUEST_TIMEOUT_MS = 10_000;
const READY_WITHIN_MS = 5_000;
const HOLDERS_READERS = 50;

function int(name: string, min: number, max: number): number {
  const n = Number(args[name as keyof typeof args]);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new Error(`--${name} must be an integer from ${min} to ${max}`);
  return n;
}

async function startServices(config: object, reaper: Reaper): Promise<Service[]> {
  const started = await Promise.allSettled([startService(config), startService(config)]);
  const services = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  for (const s of services) reaper.track(s.process);
  const failed = started.find((s) => s.status === 'rejected');
  if (failed !== undefined) {
    await Promise.all(services.map((s) => s.stop(3_000)));
    throw failed.reason;
  }
  return services;
}

/** Phase 4: A holds the lease of a held id and dies; B's readers wait for the takeover. */
async function leaseHolderDies(a: Service, b: Service, origin: Origin) {
  const id = `${HOLD_PREFIX}${randomBytes(4).toString('hex')}`;
  const holder = timedGet(itemUrl(a.url, TABLE, id), REQUEST_TIMEOUT_MS);
  if (!(await origin.seen(id, 3_000))) throw new Error('instance A never asked the origin');
  const seenAt = performance.now();
  const lease = (outcome: string) =>
    scrape(b.url, 'echostore_lease_total', { table: TABLE, outcome });
  const [contended0, takeover0] = [await lease('contended'), await lease('takeover')];
  const readers = Array.from({ length: HOLDERS_READERS }, () =>
    timedGet(itemUrl(b.url, TABLE, id), REQUEST_TIMEOUT_MS),
  );
  // Kill A only once B is waiting on A's lease, and well before A's own loadTimeoutMs.
  let contended = false;
  while (!contended && performance.now() - seenAt < POLICY.loadTimeoutMs / 2) {
    await sleep(25);
    contended = (await lease('contended')) > contended0;
  }
  const gone = new Promise((ok) => a.process.once('exit', ok));
  a.process.kill('SIGKILL');
  await gone;
  const killedAfterMs = Math.round(performance.now() - seenAt);
  origin.release(id);
  const answers = await Promise.all(readers);
  await holder;
  const ok = answers.filter((r) => r.status === 200);
  const [first, second] = origin.readsLog(id).map((r) => r.arrivedAtMs);
  return {
    id,
    readers: answers,
    ok: ok.length,
    distinct: new Set(ok.map((r) => r.body)).size,
    sourceReads: origin.readsOf(id),
    /** Between A's read and the takeover's, at the origin; undefined without a second read. */
    takeoverGapMs:
      first === undefined || second === undefined ? undefined : Math.round(second - first),
    bContended: contended,
    bTakeovers: (await lease('takeover')) - takeover0,
    killedAfterMs,
    minMs: Math.round(Math.min(...answers.map((r) => r.ms))),
    maxMs: Math.round(Math.max(...answers.map((r) => r.ms))),
  };
}

async function main(): Promise<number> {
  const loops = int('loops', 1, 200);
  const pauseMs = int('pause-ms', 0, 1_000);
  const latencyMs = int('latency-ms', 0, 1_000);
  const hotCount = int('hot', 1, 1_000);
  process.env.LOG_LEVEL ??= 'error'; // degraded-mode warnings are what this drill provokes
  const began = performance.now();
  const reaper = new Reaper();
  const run = randomBytes(3).toString('hex');
  const rows: PhaseRow[] = [];
  const checks: Check[] = [];
  const recoveries: Record<string, Recovery> = {};
  let phase4: Awaited<ReturnType<typeof leaseHolderDies>> | undefined;
  let valkey: ValkeyServer | undefined;
  let origin: Origin | undefined;
  let services: Service[] = [];
  let load: LoadGenerator | undefined;
  try {
    valkey = await spawnValkey({ track: (c) => reaper.track(c) });
    origin = await startOrigin(latencyMs);
    services = await startServices(
      {
        valkey: { url: valkey.url, ...VALKEY },
        tables: { [TABLE]: { source: { kind: 'http', url: origin.template }, ...POLICY } },
      },
      reaper,
    );
    const [a, b] = services as [Service, Service];
    const targets: Target[] = [
      { label: 'A', url: a.url },
      { label: 'B', url: b.url },
    ];
    const hotIds = Array.from({ length: hotCount }, (_, i) => `hot-${run}-${i}`);
    for (const t of targets) {
      for (const id of hotIds) await timedGet(itemUrl(t.url, TABLE, id), REQUEST_TIMEOUT_MS);
      for (const id of hotIds) {
        const r = await timedGet(itemUrl(t.url, TABLE, id), REQUEST_TIMEOUT_MS);
        if (!r.l1) throw new Error(`warming: ${id} on ${t.label} is not an L1 hit (${r.status})`);
      }
    }

    load = new LoadGenerator({
      table: TABLE,
      loops,
      pauseMs,
      hotIds,
      hotShare: 0.5,
      coldPrefix: `cold-${run}-`,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      maxRequests: 200_000,
      maxDurationMs: 90_000,
    });
    load.targets = targets;
    load.start();
    const gen = load;
    const o = origin;
    const v = valkey;
    const phase = async (name: string, body: (notes: string[]) => Promise<void>) => {
      gen.phase = name;
      const [t0, reads0, notes] = [performance.now(), o.totalReads(), [] as string[]];
      await body(notes);
      rows.push(
        phaseRow(name, gen.samples, performance.now() - t0, o.totalReads() - reads0, notes),
      );
    };

    await phase('1 baseline', () => sleep(3_000));
    await phase('2 valkey SIGKILL 10 s', async (notes) => {
      await v.kill();
      await sleep(10_000);
      const t = performance.now();
      await v.restart();
      notes.push(`restarted on port ${v.port} in ${Math.round(performance.now() - t)} ms`);
      const back = readyAgain(services, 8_000);
      await sleep(5_000);
      notes.push(`/readyz ready again ${await back} after the restart`);
      recoveries['2'] = await recovery(services, TABLE, READY_WITHIN_MS, REQUEST_TIMEOUT_MS);
    });
    await phase('3 valkey SIGSTOP 5 s', async (notes) => {
      v.pause();
      await sleep(5_000);
      v.resume();
      const back = readyAgain(services, 8_000);
      await sleep(3_000);
      notes.push(`/readyz ready again ${await back} after SIGCONT`);
      recoveries['3'] = await recovery(services, TABLE, READY_WITHIN_MS, REQUEST_TIMEOUT_MS);
    });
    await phase('4 lease holder A SIGKILL', async (notes) => {
      gen.targets = [targets[1] as Target];
      const p4 = await leaseHolderDies(a, b, o);
      phase4 = p4;
      for (const { status, code, l1, ms } of p4.readers)
        gen.samples.push({ phase: gen.phase, target: 'B', hot: false, status, code, l1, ms });
      notes.push(
        `A killed ${p4.killedAfterMs} ms after the origin saw its read (B contended: ${p4.bContended}); ` +
          `${p4.ok}/${HOLDERS_READERS} B readers 200 in ${p4.minMs}–${p4.maxMs} ms, ${p4.distinct} distinct answer(s), ` +
          `origin reads of ${p4.id}: ${p4.sourceReads} (2nd ${p4.takeoverGapMs} ms after the 1st), B takeovers: ${p4.bTakeovers}`,
      );
      await sleep(1_000);
    });
    await load.stop();
  } finally {
    await load?.stop();
    await Promise.all(services.map((s) => s.stop(5_000)));
    await valkey?.stop();
    await origin?.close();
    reaper.killAll();
  }

  const hotFailed = rows.reduce((n, r) => n + r.hotFailed, 0);
  checks.push({
    name: 'L1 hits never fail',
    pass: hotFailed === 0,
    detail: `${hotFailed} of ${rows.reduce((n, r) => n + r.hotRequests, 0)} hot-id requests not answered 200`,
  });
  const samples: Sample[] = load?.samples ?? [];
  const late = samples.filter((s) => s.ms > BOUND_MS || s.code === 'CLIENT_TIMEOUT');
  checks.push({
    name: `no request waits past ${BOUND_MS} ms (waitTimeoutMs ${POLICY.waitTimeoutMs} + loadTimeoutMs ${POLICY.loadTimeoutMs} + commandTimeoutMs ${VALKEY.commandTimeoutMs} + 1000)`,
    pass: late.length === 0,
    detail: `${late.length} late; slowest ${Math.round(Math.max(0, ...samples.map((s) => s.ms)))} ms`,
  });
  for (const [p, r] of Object.entries(recoveries)) {
    const ready = r.readyMs.every((ms) => ms !== undefined);
    checks.push({
      name: `recovery after phase ${p}: /readyz ready within ${READY_WITHIN_MS} ms and PUT + GET round-trip`,
      pass: ready && r.roundTrip,
      detail: `ready after ${r.readyMs.map((ms) => (ms === undefined ? 'never' : `${ms} ms`)).join(' / ')}; ${r.detail}`,
    });
  }
  checks.push({
    name: `dead lease holder: ${HOLDERS_READERS} readers on B answered 200 by one takeover after leaseMs, origin reads 2`,
    pass:
      phase4 !== undefined &&
      phase4.ok === HOLDERS_READERS &&
      phase4.distinct === 1 &&
      phase4.sourceReads === 2 &&
      phase4.takeoverGapMs !== undefined &&
      phase4.takeoverGapMs >= POLICY.leaseMs - 250 &&
      phase4.takeoverGapMs <= POLICY.leaseMs + 1_000,
    detail:
      phase4 === undefined
        ? 'phase 4 did not run'
        : `${phase4.ok} answered 200, ${phase4.distinct} distinct, origin reads ${phase4.sourceReads}, ` +
          `takeover read ${phase4.takeoverGapMs ?? 'never'} ms after A's (law: leaseMs ${POLICY.leaseMs} −250/+1000)`,
  });
  const pass = checks.every((c) => c.pass);
  const runtimeMs = Math.round(performance.now() - began);
  const report = { drill: 'faults', boundMs: BOUND_MS, phases: rows, checks, runtimeMs, pass };
  if (!emitJson(args.json, report)) {
    const header = `faults drill: 2 instances, ${loops} loops (half hot L1 ids, half cold), source latency ${latencyMs} ms, runtime ${(runtimeMs / 1000).toFixed(1)} s`;
    process.stdout.write(renderFaults(header, rows, checks));
  }
  return pass ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`faults drill failed to run: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(2);
  },
);
