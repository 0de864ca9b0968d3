import { describe, expect, it, onTestFinished } from 'vitest';
import { HOLD_PREFIX, startOrigin } from '../harness/origin.js';
import { httpSource } from '../src/sources/http.js';
import { openStore } from './helpers/probe.js';
import { uniqueTable, valkeyCluster } from './helpers/store.js';

const LOAD_TIMEOUT_MS = 1_500;
const MAX_CONCURRENT_LOADS = 16;

/**
 * `hanging` ids whose origin never answers are requested over and over (each
 * caller asks again as soon as it is answered) while one reader makes cold
 * GETs of healthy ids, one after another, for `runMs`. Counted at the origin.
 */
async function run(hanging: number, runMs: number) {
  const origin = await startOrigin(5, 60_000);
  onTestFinished(() => origin.close());
  const source = httpSource({ url: origin.template });
  onTestFinished(() => source.close());
  const table = uniqueTable('hanging');
  const store = await openStore({
    [table]: {
      load: source.load,
      loadTimeoutMs: LOAD_TIMEOUT_MS,
      maxConcurrentLoads: MAX_CONCURRENT_LOADS,
    },
  });
  const t = store.table(table);
  const endAt = performance.now() + runMs;
  const hangingCodes = new Map<string, number>();
  const hangingMs: number[] = [];
  const askHanging = async (id: string) => {
    while (performance.now() < endAt) {
      const started = performance.now();
      const code = await t.get(id).then(
        () => 'ok',
        (e: { code: string }) => e.code,
      );
      hangingMs.push(performance.now() - started);
      hangingCodes.set(code, (hangingCodes.get(code) ?? 0) + 1);
      // A client that backs off a little after a refusal (and spares the shared CPU).
      if (code === 'ECC_SHED') await new Promise((r) => setTimeout(r, 20));
    }
  };
  const healthyMs: number[] = [];
  let healthyFailed = 0;
  const askHealthy = async () => {
    // Let the hanging loads take their slots first.
    await new Promise((r) => setTimeout(r, 50));
    for (let i = 0; performance.now() < endAt; i++) {
      const started = performance.now();
      try {
        await t.get(`healthy-${i}`);
        healthyMs.push(performance.now() - started);
      } catch {
        healthyFailed++;
      }
    }
  };
  await Promise.all([
    ...Array.from({ length: hanging }, (_, i) => askHanging(`${HOLD_PREFIX}${i}`)),
    askHealthy(),
  ]);
  healthyMs.sort((x, y) => x - y);
  const answered = healthyMs.length / (healthyMs.length + healthyFailed);
  return {
    answered,
    healthyP95Ms: healthyMs[Math.floor(healthyMs.length * 0.95)] ?? Number.POSITIVE_INFINITY,
    hangingMaxMs: Math.max(...hangingMs),
    hangingCodes,
    peakAtOrigin: origin.peakOpen(),
  };
}

describe.skipIf(valkeyCluster() !== undefined)('a few hanging ids do not starve the table', () => {
  for (const hanging of [16, 40]) {
    it(`with ${hanging} ids whose origin never answers, ≥ 95 % of healthy cold GETs are answered at their normal latency, the hanging ones within loadTimeoutMs, and the origin's concurrency stays bounded`, async () => {
      const r = await run(hanging, 4_000);
      expect(r.answered).toBeGreaterThanOrEqual(0.95);
      expect(r.healthyP95Ms).toBeLessThan(200);
      // Every hanging caller is answered (timeout or shed): its load within loadTimeoutMs, after
      // at most maxQueueDelayMs (2 s) for a slot, plus slack for a busy machine.
      expect(r.hangingMaxMs).toBeLessThan(LOAD_TIMEOUT_MS + 2_000 + 500);
      expect(
        [...r.hangingCodes.keys()].every((c) => c === 'ECC_LOAD_TIMEOUT' || c === 'ECC_SHED'),
      ).toBe(true);
      // maxConcurrentLoads + maxOverdueLoads (64 by default), counted at the origin.
      expect(r.peakAtOrigin).toBeLessThanOrEqual(MAX_CONCURRENT_LOADS + 64);
    });
  }
});
