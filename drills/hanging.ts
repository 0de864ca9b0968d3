/**
 * Hanging-ids drill: a few ids whose origin never answers must not starve the table → healthy
 * GETs keep their latency, hanging callers are answered within their bound, the origin's open
 * requests stay bounded (counted there). Usage and laws: drills/README.md#hanging.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { HOLD_PREFIX, type Origin, startOrigin } from '../harness/origin.js';
import { startService, withServices } from '../harness/service.js';
import { drillArgs, float, int, runDrill, valkeyOption } from './lib/cli.js';
import { itemUrl, timed } from './lib/http.js';
import { check, columns, countBy, listCounts, maxMs, percentile, round } from './lib/report.js';
import { drillValkey, originConfig, QUIET } from './lib/store.js';

const args = drillArgs({
  'phase-s': float(15, 1, 600),
  readers: int(4, 1, 64),
  'latency-ms': float(10, 0, 1_000),
  valkey: valkeyOption(),
});

const TABLE = 'hanging';
const POLICY = { loadTimeoutMs: 2_000, maxConcurrentLoads: 16, maxOverdueLoads: 64 };
const PHASES = [0, 16, 40];
/**
 * A hanging caller is answered within loadTimeoutMs + this: its load may first wait for a slot
 * up to maxQueueDelayMs (2 s by default: the first callers of fresh hanging ids queue until the
 * pool is found stalled), and a timer on a shared, busy CPU fires late.
 */
const HANGING_SLACK_MS = 2_500;

/** One GET (no client timeout): its error code (`ok` when 200), and how long it took, ms. */
async function get(url: string): Promise<{ code: string; ms: number }> {
  const r = await timed(url, 600_000);
  return { code: r.status === 200 ? 'ok' : (r.code ?? String(r.status)), ms: r.ms };
}

/** One phase: `hanging` ids whose origin never answers, asked beside `--readers` healthy readers. */
async function runPhase(origin: Origin, url: string, run: string, hanging: number) {
  let peakOpen = origin.open();
  const sampler = setInterval(() => (peakOpen = Math.max(peakOpen, origin.open())), 5);
  const endAt = performance.now() + args['phase-s'] * 1000;
  const [healthy, hung]: Array<{ code: string; ms: number }>[] & { length: 2 } = [[], []];
  const askHanging = async (id: string) => {
    while (performance.now() < endAt) {
      const r = await get(itemUrl(url, TABLE, id));
      hung.push(r);
      // A client that backs off a little after a refusal.
      if (r.code !== 'ECC_LOAD_TIMEOUT') await sleep(20);
    }
  };
  const askHealthy = async (reader: number) => {
    // The hanging callers go first, so their loads hold slots before the healthy ones come.
    await sleep(hanging === 0 ? 0 : 100);
    for (let i = 0; performance.now() < endAt; i++) {
      healthy.push(await get(itemUrl(url, TABLE, `ok-${run}-${hanging}-${reader}-${i}`)));
    }
  };
  await Promise.all([
    ...Array.from({ length: hanging }, (_, i) =>
      askHanging(`${HOLD_PREFIX}${run}-${hanging}-${i}`),
    ),
    ...Array.from({ length: args.readers }, (_, r) => askHealthy(r)),
  ]);
  clearInterval(sampler);
  const healthyMs = healthy.filter((r) => r.code === 'ok').map((r) => r.ms);
  // The last hanging loads are aborted at loadTimeoutMs: let them go before the next phase.
  const settleBy = performance.now() + POLICY.loadTimeoutMs + 1_000;
  while (origin.open() > 0 && performance.now() < settleBy) await sleep(50);
  return {
    hanging,
    healthy: healthy.length,
    healthyAnswered: healthyMs.length,
    healthyAnsweredShare: round(healthyMs.length / Math.max(1, healthy.length), 4),
    healthyP50Ms: round(percentile(healthyMs, 50), 1),
    healthyP95Ms: round(percentile(healthyMs, 95), 1),
    healthyCodes: countBy(healthy, (r) => r.code),
    hangingAnswers: hung.length,
    hangingCodes: countBy(hung, (r) => r.code),
    hangingMaxMs: maxMs(hung.map((r) => r.ms)),
    originPeakOpen: peakOpen,
  };
}

runDrill('hanging', args.json, async () => {
  const origin = await startOrigin(args['latency-ms'], 600_000);
  const valkey = await drillValkey(args.valkey, false);
  const run = randomBytes(4).toString('hex');
  const phases: Array<Awaited<ReturnType<typeof runPhase>>> = [];
  const config = originConfig(valkey.section, TABLE, origin.template, POLICY, QUIET);
  await withServices([startService(config)], async ([service]) => {
    const url = service?.url as string;
    // Warm-up, not counted: the first requests pay for JIT and connections.
    for (let i = 0; i < 200; i++) await get(itemUrl(url, TABLE, `warm-${run}-${i}`));
    for (const hanging of PHASES) phases.push(await runPhase(origin, url, run, hanging));
  }).finally(async () => {
    await origin.close();
    await valkey.close();
  });
  const boundMs = round(2 * (phases[0]?.healthyP95Ms ?? 0) + 10, 1);
  const hangingMs = POLICY.loadTimeoutMs + HANGING_SLACK_MS;
  const openBound = POLICY.maxConcurrentLoads + POLICY.maxOverdueLoads;
  return {
    title: `hanging drill: ${args.readers} healthy readers of cold ids, source latency ${args['latency-ms']} ms, ${args['phase-s']} s per phase, loadTimeoutMs ${POLICY.loadTimeoutMs}, on ${valkey.label}`,
    body: [
      columns(
        phases.map((p) => [
          `${p.hanging} hanging ids`,
          `healthy ${p.healthyAnswered}/${p.healthy} answered (${round(p.healthyAnsweredShare * 100, 1)} %), p50 ${p.healthyP50Ms} ms, p95 ${p.healthyP95Ms} ms; hanging callers ${p.hangingAnswers} answers (${listCounts(p.hangingCodes)}), slowest ${p.hangingMaxMs} ms; origin peak ${p.originPeakOpen} open`,
        ]),
      ),
    ],
    phases,
    checks: phases.slice(1).map((p) => {
      const ok = p.healthyAnsweredShare >= 0.95 && p.healthyP95Ms <= boundMs;
      const refused = Object.keys(p.hangingCodes).every((c) => /^ECC_(LOAD_TIMEOUT|SHED)$/.test(c));
      const bounded = p.hangingMaxMs <= hangingMs && refused && p.originPeakOpen <= openBound;
      return check(
        `with ${p.hanging} hanging ids: healthy answered ≥ 95 %, p95 ≤ ${boundMs} ms (2 × the first phase's + 10); hanging callers refused within ${hangingMs} ms; origin ≤ ${openBound} open`,
        ok && bounded,
        `${round(p.healthyAnsweredShare * 100, 1)} %, p95 ${p.healthyP95Ms} ms; slowest ${p.hangingMaxMs} ms (${listCounts(p.hangingCodes)}); ${p.originPeakOpen} open`,
      );
    }),
  };
});
