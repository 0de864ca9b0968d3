import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { manualClock } from './helpers/clock.js';
import { errorOf, metricValue, openStore } from './helpers/probe.js';
import { spawnServer } from './helpers/server.js';
import { uniqueTable } from './helpers/store.js';

describe('degraded mode (circuit breaker)', () => {
  it('after repeated timeouts on a paused server, misses skip Valkey, writes fail fast, and it recovers by itself', async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const table = uniqueTable('circuit');
    // The breaker's cool-down (1 s) passes on this clock, not by sleeping.
    const clock = manualClock();
    let loads = 0;
    const store = await openStore(
      {
        [table]: {
          loadTimeoutMs: 500,
          leaseMs: 1_000,
          load: (id) => {
            loads++;
            return { id };
          },
        },
      },
      { valkey: { url: server.url, commandTimeoutMs: 150 }, breaker: { now: clock.now } },
    );
    const t = store.table(table);
    // One series per reason: their sum is 1 while degraded.
    const degradedGauge = async () =>
      (await store.registry.getSingleMetric('echostore_valkey_degraded')?.get())?.values.reduce(
        (sum, v) => sum + v.value,
        0,
      );
    expect(store.valkeyReady()).toBe(true);
    expect(await degradedGauge()).toBe(0);

    const pid = server.process?.pid as number;
    process.kill(pid, 'SIGSTOP');
    let resumed = false;
    onTestFinished(() => {
      if (!resumed) process.kill(pid, 'SIGCONT');
    });
    // Each of the first misses pays one command timeout, then the circuit opens.
    for (let i = 0; i < 3; i++) expect((await t.get(`slow-${i}`)).found).toBe(true);
    expect(store.valkeyReady()).toBe(false);
    expect(await degradedGauge()).toBe(1);

    const started = performance.now();
    for (let i = 0; i < 20; i++) expect((await t.get(`fast-${i}`)).layer).toBe('origin');
    // 20 misses while open cost no command timeout at all (each would cost 150 ms).
    expect(performance.now() - started).toBeLessThan(20 * 150);
    expect((await errorOf(t.put('w', 1))).code).toBe('ECC_VALKEY_UNAVAILABLE');
    // Not sent, so no Valkey error: counted as a refused write instead.
    const refused = { op: 'put' };
    expect(await metricValue(store, 'echostore_writes_refused_total', table, refused)).toBe(1);
    // Past the cool-down the circuit is half-open: one probe may go, but until a
    // command succeeds the store still says degraded.
    clock.advance(1_000);
    expect(store.valkeyReady()).toBe(false);
    const probes = await Promise.all(Array.from({ length: 10 }, (_, i) => t.get(`half-${i}`)));
    expect(probes.every((p) => p.layer === 'origin')).toBe(true);
    expect((await errorOf(t.invalidate('w'))).code).toBe('ECC_VALKEY_UNAVAILABLE');
    expect(loads).toBe(33);

    process.kill(pid, 'SIGCONT');
    resumed = true;
    // Each cool-down lets one probe through; the first the server answers closes the circuit.
    let probe = 0;
    await vi.waitFor(
      async () => {
        clock.advance(1_000);
        await t.get(`probe-${probe++}`);
        expect(store.valkeyReady()).toBe(true);
      },
      { timeout: 5_000 },
    );
    expect(await degradedGauge()).toBe(0);
    await t.put('w', { back: true });
    const r = await t.get('w');
    expect(r.found && r.value).toEqual({ back: true });
  });
});
