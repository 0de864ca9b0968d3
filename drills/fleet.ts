/**
 * Fleet drill: clock skew, a dead lease holder, and admission by queueing delay, each on
 * real service processes and judged by what the origin counted. Usage and laws:
 * drills/README.md#fleet.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { metric, scrape } from '../harness/metrics.js';
import { HOLD_PREFIX, type Origin, withOrigin } from '../harness/origin.js';
import { type Service, SKEW_CLOCK, startService, withServices } from '../harness/service.js';
import { DEFAULT_POLICY } from '../src/store/policy.js';
import { drillArgs, oneOf, runDrill, valkeyOption } from './lib/cli.js';
import { type OriginRead, readItem } from './lib/http.js';
import { type Check, check, columns, law, median, msOf, p50p99, sum } from './lib/report.js';
import { connectAdmin, originConfig, QUIET } from './lib/store.js';

const args = drillArgs({
  scenario: oneOf('all', 'skew', 'holder', 'admission'),
  valkey: valkeyOption(),
});
const run = randomBytes(3).toString('hex');
const { maxConcurrentLoads: MAX, initialConcurrentLoads: INITIAL } = DEFAULT_POLICY;
/** Admission: rounds of the slowed burst; per round, cold ids and the ids in L2 sent with them. */
const [ROUNDS, COLD, IN_L2] = [3, 400, 200];
/** The slowed source's latency, and how far a shed's p99 may lie above the L2 hits': half of it, ms. */
const [SLOW_MS, SHED_OVER_L2_MS] = [500, 250];

/** What one scenario printed and judged. */
type Scenario = { lines: string[]; figures: object; checks: Check[] };

/** Runs `body` on an origin (`[latencyMs, holdMs]`) and services of `table` on it (`starts` options each). */
const fleetOf = <T>(
  table: string,
  originArgs: [number, number?],
  starts: Array<Parameters<typeof startService>[1]>,
  policy: object,
  body: (origin: Origin, services: Service[]) => Promise<T>,
) =>
  withOrigin(originArgs, (origin) => {
    const config = originConfig({ url: args.valkey }, table, origin.template, policy, QUIET);
    const services = starts.map((o) => startService(config, o));
    return withServices(services, (started) => body(origin, started));
  });

/** Three instances, two with clocks 10 min off: one source read per key, no TTL stretched by a clock. */
function skew(): Promise<Scenario> {
  const [table, ttlMs, jitter, keysPerHost] = [`skew-${run}`, 2_000, 0.2, 20];
  const skewed = (d: number) => ({ nodeArgs: ['--import', SKEW_CLOCK], env: { SKEW_MS: `${d}` } });
  const policy = { ttlMs, jitter, staleMs: 0, earlyRefreshBeta: 0 };
  const starts = [{}, skewed(600_000), skewed(-600_000)];
  return fleetOf(table, [5], starts, policy, async (origin, hosts) => {
    let [maxTtlS, failures] = [Number.NEGATIVE_INFINITY, 0];
    for (const [h, host] of hosts.entries())
      for (let k = 0; k < keysPerHost; k++)
        for (const reader of [host, ...hosts.filter((x) => x !== host)]) {
          const r = await readItem(reader.url, table, `h${h}-k${k}`);
          if (r.status !== 200) failures++;
          const ttl = /ttl=(-?\d+)/.exec(r.cacheStatus ?? '')?.[1];
          if (ttl !== undefined) maxTtlS = Math.max(maxTtlS, Number(ttl));
        }
    const reads = origin.totalReads();
    await sleep(ttlMs * (1 + jitter) + 300);
    let servedExpired = 0;
    for (const host of hosts)
      for (let k = 0; k < 5; k++)
        if ((await readItem(host.url, table, `h0-k${k}`)).read === 1) servedExpired++;
    const boundS = Math.trunc((ttlMs * (1 + jitter)) / 1000);
    const keys = hosts.length * keysPerHost;
    return {
      lines: [
        'skew: 3 instances (clock right, +10 min, -10 min) on one Valkey, ttlMs 2000, jitter 0.2',
      ],
      figures: { skew: { reads, maxTtlS, servedExpired, failures } },
      checks: [
        law('skew: source reads (counted by the source), one per key', reads, keys),
        law(
          'skew: largest Cache-Status ttl served',
          `${maxTtlS} s`,
          `≤ ${boundS}`,
          maxTtlS <= boundS,
        ),
        law('skew: old values answered after the TTL', servedExpired, 0),
        law('skew: failed reads', failures, 0),
      ],
    };
  });
}

/** The lease holder dies 0.3 s into a 2 s load: one more source read, every waiter answered. */
function holder(): Promise<Scenario> {
  const [table, id, loadMs] = [`holder-${run}`, `${HOLD_PREFIX}${run}`, 300];
  // The first read is held 1.7 s, then answers after loadMs: a 2 s load. The holder dies before.
  return fleetOf(table, [loadMs, 2_000 - loadMs], [{}, {}, {}], {}, async (origin, hosts) => {
    const [a, b, c] = hosts as [Service, Service, Service];
    void readItem(a.url, table, id);
    if (!(await origin.seen(id, 5_000))) throw new Error('the holder never reached the source');
    await sleep(300);
    a.process.kill('SIGKILL');
    origin.release(id); // reads from now on answer after loadMs: the takeover load
    const readers = Array.from({ length: 100 }, (_, i) => readItem((i % 2 ? c : b).url, table, id));
    const results = await Promise.all(readers);
    const ok = results.filter((r) => r.status === 200).length;
    const answers = new Set(results.map((r) => r.read)).size;
    const { p50Ms, p99Ms } = p50p99(msOf(results), 0);
    const sourceReads = origin.readsOf(id);
    const codes = results.filter((r) => r.status !== 200).map((r) => r.code);
    const other = [...new Set(codes)].join(', ');
    const answered = `${ok} of ${results.length}${other && ` (others ${other})`}`;
    return {
      lines: [
        'holder: 3 instances, default policy; the lease holder SIGKILLed 0.3 s into a 2 s load; 100 readers on the other two; takeover load 300 ms',
        `  latency p50 ${p50Ms} ms`,
      ],
      figures: { holder: { sourceReads, ok, answers, p50Ms, p99Ms } },
      checks: [
        law('holder: source reads (counted by the source)', sourceReads, 2),
        law('holder: answered 200', answered, 'all', ok === 100),
        law('holder: distinct answers', answers, 1),
        law('holder: latency p99', `${p99Ms} ms`, '≤ 3000', p99Ms <= 3_000),
      ],
    };
  });
}

/** `n` ids: `<prefix>-0` … `<prefix>-<n-1>`. */
const idsOf = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

/** Counts and p99s (0 when none) of one burst's answers. */
function tally(results: OriginRead[]) {
  const p99 = (xs: OriginRead[]) => (xs.length === 0 ? 0 : p50p99(msOf(xs), 0).p99Ms);
  const shed = results.filter((r) => r.code === 'ECC_SHED');
  const ok = results.filter((r) => r.status === 200);
  const other = results.length - ok.length - shed.length;
  return { ok: ok.length, shed: shed.length, other, shedP99Ms: p99(shed), okP99Ms: p99(ok) };
}

/** A healthy source is never shed; a slow one sheds the excess fast (a second instance fills L2). */
function admission(): Promise<Scenario> {
  const table = `admit-${run}`;
  return fleetOf(table, [20], [{}, {}], {}, async (origin, hosts) => {
    const [s, filler] = hosts as [Service, Service];
    const burst = (on: Service, ids: string[]) =>
      Promise.all(ids.map((id) => readItem(on.url, table, id, 15_000)));
    const limitNow = async () =>
      metric(await scrape(s.url), 'echostore_load_limit', { table }) ?? Number.NaN;
    const healthy = tally(await burst(s, idsOf('healthy', COLD)));
    const healthyPeak = origin.peakInFlight();
    // While the source is still fast: the filler reads each round's L2 ids (40 at a time, so
    // that nothing is shed); the instance under test will find them in L2, not in its L1.
    for (let round = 0; round < ROUNDS; round++) {
      const ids = idsOf(`l2-${round}`, IN_L2);
      for (let i = 0; i < ids.length; i += 40) {
        const filled = await burst(filler, ids.slice(i, i + 40));
        if (filled.some((r) => r.status !== 200)) throw new Error('the filler could not fill L2');
      }
    }
    origin.setLatency(SLOW_MS);
    origin.resetPeak();
    // A trickle that lets the instance see the slowdown (16 at a time, twice).
    const limitBefore = await limitNow();
    let lowest = limitBefore;
    for (let wave = 0; wave < 2; wave++) {
      await burst(s, idsOf(`trickle-${wave}`, 16));
      lowest = Math.min(lowest, await limitNow());
    }
    const limitAfter = lowest;
    // Each round: 400 new cold ids on the slowed source, one in three interleaved with an id in
    // L2 only (an L2 hit costs the one Valkey round trip a shed costs too).
    const rounds = [];
    for (let round = 0; round < ROUNDS; round++) {
      const cold = idsOf(`slow-${round}`, COLD);
      const inL2 = idsOf(`l2-${round}`, IN_L2);
      const mixed = cold.flatMap((id, i) => (i % 2 === 1 ? [id, inL2[i >> 1] as string] : [id]));
      const readsBefore = origin.totalReads();
      const answers = await burst(s, mixed);
      const l2 = tally(answers.filter((_, i) => mixed[i]?.startsWith('l2-')));
      const slow = tally(answers.filter((_, i) => mixed[i]?.startsWith('slow-')));
      // Counted at the source: every source read of the round was a cold id's.
      const coldReads = sum(cold, (id) => origin.readsOf(id));
      const l2Ok = l2.ok === IN_L2 && origin.totalReads() - readsBefore === coldReads;
      lowest = Math.min(lowest, await limitNow());
      rounds.push({ ...slow, l2P99Ms: l2.okP99Ms, l2Ok, overMs: slow.shedP99Ms - l2.okP99Ms });
    }
    const slowPeak = origin.peakInFlight();
    const medianOverMs = median(rounds.map((r) => r.overMs));
    const h = healthy;
    const cells = (r: typeof h) => [r.ok, r.shed, r.other, r.shedP99Ms, r.okP99Ms];
    const tallies = rounds.map(
      (r) => `${r.ok}/${r.shed}/${r.other} answered/shed/other, L2 ${r.l2Ok ? 'ok' : 'NOT ok'}`,
    );
    const slowed = rounds.map((r, i) => [
      ...[`slowed (${SLOW_MS} ms) #${i + 1}`, ...cells(r)],
      ...(i === rounds.length - 1 ? [slowPeak, lowest] : ['', '']),
    ]);
    const header = ['source', 'answered 200', 'shed', 'other', 'shed p99 ms', 'answered p99 ms'];
    return {
      lines: [
        `admission: 1 instance under test (a second one only fills L2), default policy (the load limit starts at ${INITIAL}, at most ${MAX}); each row: 400 concurrent GETs of distinct cold ids`,
        `  between the healthy row and the slowed ones, a trickle of 32 GETs (16 at a time, twice) on the ${SLOW_MS} ms source: limit ${limitBefore} → ${limitAfter}`,
        columns(
          [['healthy (20 ms)', ...cells(h), healthyPeak, '-'], ...slowed],
          [...header, 'source peak', 'lowest limit'],
        ),
        `  with each slowed burst, 200 GETs of ids in L2 only: p99 ${rounds.map((r) => r.l2P99Ms).join(' / ')} ms; the shed p99 exceeds it by ${rounds.map((r) => r.overMs).join(' / ')} ms`,
      ],
      figures: {
        admission: { healthy, healthyPeak, limitBefore, limitAfter, rounds, slowPeak, lowest },
      },
      checks: [
        check(
          `admission: a healthy source is never shed: 400 answered 200, source peak ≤ ${MAX} (counted by the source)`,
          h.shed === 0 && h.other === 0 && h.ok === COLD && healthyPeak <= MAX,
          `${h.ok} answered, ${h.shed} shed, ${h.other} other; source peak ${healthyPeak}`,
        ),
        check(
          'admission: a slow source sheds in every round, nothing else fails, the L2 ids answered without a source read (HTTP + one Valkey round trip)',
          rounds.every((r) => r.l2Ok && r.shed > 0 && r.other === 0 && r.ok + r.shed === COLD),
          tallies.join('; '),
        ),
        law(
          "admission: the shed p99 over the L2 hits' p99, median of the rounds",
          `${medianOverMs} ms`,
          `≤ ${SHED_OVER_L2_MS} ms (half a slowed load: no shed waited for a slot)`,
          medianOverMs <= SHED_OVER_L2_MS,
        ),
        law(
          'admission: slowed source peak (counted by the source)',
          slowPeak,
          `≤ ${INITIAL}`,
          slowPeak <= INITIAL,
        ),
      ],
    };
  });
}

runDrill('fleet', args.json, async () => {
  // The services start degraded without Valkey, and every law would fail: refuse it up front.
  (await connectAdmin(args.valkey)).disconnect();
  const ran: Scenario[] = [];
  for (const [name, scenario] of Object.entries({ skew, holder, admission }))
    if (args.scenario === 'all' || args.scenario === name) ran.push(await scenario());
  return {
    title: `fleet drill: ${args.scenario === 'all' ? 'clock skew, a dead lease holder, admission' : args.scenario}`,
    body: ran.flatMap((r) => r.lines),
    scenarios: ran.map((r) => r.figures),
    checks: ran.flatMap((r) => r.checks),
  };
});
