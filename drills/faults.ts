/**
 * Fault drill: two services under load while their own Valkey is killed, paused, refuses
 * (OOM, read-only, an ACL without channels), their subscribers freeze, and a lease holder dies.
 * Phases 1–9 and their laws: drills/README.md#faults.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { metric, scrape } from '../harness/metrics.js';
import { HOLD_PREFIX, type Origin } from '../harness/origin.js';
import type { Service } from '../harness/service.js';
import { stopChild } from '../harness/spawn.js';
import { startTcpProxy, type TcpProxy } from '../harness/tcp-proxy.js';
import { spawnValkey, type ValkeyServer } from '../harness/valkey-server.js';
import { drillArgs, int, runDrill } from './lib/cli.js';
import {
  boundCheck,
  type FaultPair,
  FAULT_POLICY as POLICY,
  readyAgain,
  recovery,
  request,
  startFaultPair,
  until,
  FAULT_VALKEY as VALKEY,
} from './lib/fault-policy.js';
import type { Timed } from './lib/http.js';
import { Loops, pick } from './lib/load.js';
import { REFUSALS, type RefusalDrill } from './lib/refusals.js';
import { type Check, columns, countBy, law, listCounts, maxMs, sum } from './lib/report.js';

const args = drillArgs({
  loops: int(20, 1, 200),
  'pause-ms': int(20, 0, 1_000),
  'latency-ms': int(20, 0, 1_000),
  hot: int(20, 1, 1_000),
});
const TABLE = 'faults';
const HOLDERS_READERS = 50;

/** One request of the load: the phase in effect, the instance asked, whether a hot (L1) id. */
type Sample = Omit<Timed, 'body'> & { phase: string; target: string; hot: boolean };

/** Phase 9: A holds the lease of a held id and dies; B's readers wait for the takeover. */
async function leaseHolderDies(a: Service, b: Service, origin: Origin) {
  const id = `${HOLD_PREFIX}${randomBytes(4).toString('hex')}`;
  const holder = request(a.url, TABLE, id);
  if (!(await origin.seen(id, 3_000))) throw new Error('instance A never asked the origin');
  const seenAt = performance.now();
  const lease = async (outcome: string) =>
    metric(await scrape(b.url), 'echostore_lease_total', { table: TABLE, outcome }) ?? 0;
  const [contended0, takeover0] = [await lease('contended'), await lease('takeover')];
  const readers = Array.from({ length: HOLDERS_READERS }, () => request(b.url, TABLE, id));
  // Kill A only once B is waiting on A's lease, and well before A's own loadTimeoutMs.
  const waiting = async () => (await lease('contended')) > contended0;
  const contended = (await until(POLICY.loadTimeoutMs / 2, waiting)) !== undefined;
  await stopChild(a.process);
  const killedAfterMs = Math.round(performance.now() - seenAt);
  origin.release(id);
  const answers = await Promise.all(readers);
  await holder;
  const ok = answers.filter((r) => r.status === 200);
  const distinct = new Set(ok.map((r) => r.body)).size;
  const reads = origin.readsOf(id);
  // Between A's read and the takeover's, at the origin; undefined without a second read.
  const [first, second] = origin.readsLog(id).map((r) => r.arrivedAtMs);
  const gapMs = second === undefined ? undefined : Math.round(second - (first as number));
  const ms = answers.map((r) => r.ms);
  const takeovers = (await lease('takeover')) - takeover0;
  const { leaseMs } = POLICY;
  const lawful = gapMs !== undefined && gapMs >= leaseMs - 250 && gapMs <= leaseMs + 1_000;
  const check: Check = {
    name: `dead lease holder: ${HOLDERS_READERS} readers on B answered 200 by one takeover after leaseMs (${leaseMs} −250/+1000), origin reads 2`,
    pass: ok.length === HOLDERS_READERS && distinct === 1 && reads === 2 && lawful,
    detail:
      `A killed ${killedAfterMs} ms after the origin saw its read (B contended: ${contended}); ` +
      `${ok.length} B readers 200 in ${Math.round(Math.min(...ms))}–${maxMs(ms)} ms, ${distinct} distinct, ` +
      `origin reads ${reads}, the takeover's ${gapMs ?? 'never'} ms after A's, B takeovers: ${takeovers}`,
  };
  return { answers, check };
}

runDrill('faults', args.json, async () => {
  process.env.LOG_LEVEL ??= 'error'; // degraded-mode warnings are what this drill provokes
  const began = performance.now();
  const run = randomBytes(3).toString('hex');
  const rows: Array<Array<string | number>> = [];
  const notes: string[] = [];
  /** Checks judged during the phases, in phase order. */
  const checks: Check[] = [];
  let valkey: ValkeyServer | undefined;
  let proxy: TcpProxy | undefined;
  let admin: Redis | undefined;
  let pair: FaultPair | undefined;
  let load: Loops<Sample> | undefined;
  try {
    valkey = await spawnValkey();
    // The instances reach Valkey through a proxy, so phase 8 can freeze their subscribers.
    proxy = await startTcpProxy(valkey.port);
    admin = new Redis(valkey.url, { maxRetriesPerRequest: null });
    admin.on('error', () => {});
    pair = await startFaultPair({ url: proxy.url, coherence: true }, TABLE, args['latency-ms']);
    const { origin, services, config } = pair;
    const [a, b] = services as [Service, Service];
    let targets = [
      { label: 'A', url: a.url },
      { label: 'B', url: b.url },
    ];
    const hotIds = Array.from({ length: args.hot }, (_, i) => `hot-${run}-${i}`);
    for (const t of targets) {
      for (const id of hotIds) await request(t.url, TABLE, id);
      for (const id of hotIds) {
        const r = await request(t.url, TABLE, id);
        if (!r.l1) throw new Error(`warming: ${id} on ${t.label} is not an L1 hit (${r.status})`);
      }
    }
    // Half hot ids (L1 hits), half fresh cold ids (misses), each to a random current target.
    let cold = 0;
    const gen = new Loops<Sample>({
      loops: args.loops,
      pauseMs: args['pause-ms'],
      maxSteps: 200_000,
      maxDurationMs: 90_000,
      async step(phase) {
        const target = pick(targets);
        if (target === undefined) return undefined;
        const hot = Math.random() < 0.5;
        const id = hot ? (pick(hotIds) as string) : `cold-${run}-${++cold}`;
        const { body: _, ...r } = await request(target.url, TABLE, id);
        return { phase, target: target.label, hot, ...r };
      },
    });
    load = gen;
    gen.start();
    const [o, v] = [origin, valkey];
    /** Runs one phase under the load; its row: what the clients saw, and the source reads. */
    const phase = async (name: string, body: (notes: string[]) => Promise<void>) => {
      gen.phase = name;
      const [t0, reads0, mine] = [performance.now(), o.totalReads(), [] as string[]];
      await body(mine);
      notes.push(...mine.map((n) => `  ${name.split(' ')[0]}: ${n}`));
      const s = gen.samples.filter((x) => x.phase === name);
      const hot = s.filter((x) => x.hot);
      const codes = (status: (x: number) => boolean, none: string) =>
        listCounts(countBy(s, (x) => (status(x.status) ? (x.code ?? none) : undefined)));
      rows.push([
        ...[name, ((performance.now() - t0) / 1000).toFixed(1), s.length],
        s.filter((x) => x.status >= 200 && x.status < 500).length,
        codes((x) => x >= 500, 'NO_CODE'),
        codes((x) => x === 0, 'UNKNOWN'),
        ...[hot.length, hot.filter((x) => x.status !== 200).length],
        hot.filter((x) => x.status === 200 && !x.l1).length,
        ...[maxMs(s.map((x) => x.ms)), maxMs(hot.map((x) => x.ms)), o.totalReads() - reads0],
      ]);
    };
    // After a fault: keep the load on for `ms`, noting when /readyz said ready again; then judge recovery.
    const recover = async (p: string, ms: number, after: string, notes: string[]) => {
      const back = readyAgain(services, 8_000);
      await sleep(ms);
      notes.push(`/readyz ready again ${await back} ${after}`);
      checks.push(await recovery(p, services, TABLE));
    };

    await phase('1 baseline', () => sleep(3_000));
    await phase('2 valkey SIGKILL 10 s', async (notes) => {
      await v.kill();
      await sleep(10_000);
      const t = performance.now();
      await v.restart();
      notes.push(`restarted on port ${v.port} in ${Math.round(performance.now() - t)} ms`);
      await recover('2', 5_000, 'after the restart', notes);
    });
    await phase('3 valkey SIGSTOP 5 s', async (notes) => {
      v.pause();
      await sleep(5_000);
      v.resume();
      await recover('3', 3_000, 'after SIGCONT', notes);
    });
    const drill: RefusalDrill = {
      ...{ services, valkey: v, admin, proxy, origin: o, table: TABLE, config, run },
    };
    for (const [i, [name, refusal]] of REFUSALS.entries()) {
      const p = String(i + 4);
      await phase(`${p} ${name}`, async () => {
        checks.push(await refusal(drill));
        if (Number(p) <= 6) checks.push(await recovery(p, services, TABLE));
      });
    }
    await phase('9 lease holder A SIGKILL', async () => {
      targets = targets.slice(1);
      const p9 = await leaseHolderDies(a, b, o);
      for (const { body: _, ...r } of p9.answers)
        gen.samples.push({ phase: gen.phase, target: 'B', hot: false, ...r });
      checks.push(p9.check);
      await sleep(1_000);
    });
  } finally {
    await load?.stop();
    await pair?.stop();
    admin?.disconnect();
    await proxy?.close();
    await valkey?.stop();
  }
  const samples = load?.samples ?? [];
  const hot = samples.filter((s) => s.hot);
  const header = ['phase', 'secs', 'requests', 'answered', 'failed 5xx', 'no answer', 'L1 reqs'];
  return {
    title: `faults drill: 2 instances, ${args.loops} loops (half hot L1 ids, half cold), source latency ${args['latency-ms']} ms, runtime ${((performance.now() - began) / 1000).toFixed(1)} s`,
    body: [
      columns(rows, [
        ...header,
        ...['L1 failed', 'L1 not hit', 'max ms', 'L1 max ms', 'source reads'],
      ]),
      ...notes,
    ],
    phases: rows,
    checks: [
      law(
        'L1 hits never fail: hot-id requests not answered 200',
        `${sum(hot, (s) => (s.status === 200 ? 0 : 1))} of ${hot.length}`,
        0,
        hot.every((s) => s.status === 200),
      ),
      boundCheck(
        samples,
        ` (waitTimeoutMs ${POLICY.waitTimeoutMs} + loadTimeoutMs ${POLICY.loadTimeoutMs} + commandTimeoutMs ${VALKEY.commandTimeoutMs} + 1000)`,
        (s) => s.code === 'CLIENT_TIMEOUT',
      ),
      ...checks,
    ],
  };
});
