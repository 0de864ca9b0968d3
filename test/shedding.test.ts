import { describe, expect, it, vi } from 'vitest';
import { errorOf, metricValue, openStore } from './helpers/probe.js';
import { deferred, uniqueTable } from './helpers/store.js';

describe('shedding and bounded waiting', () => {
  it('queues loads beyond maxConcurrentLoads up to maxQueuedLoads, then sheds with ECC_SHED', async () => {
    const table = uniqueTable('queue');
    const gate = deferred<void>();
    let running = 0;
    let peak = 0;
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 2,
        maxQueuedLoads: 3,
        loadTimeoutMs: 5_000,
        leaseMs: 10_000,
        load: async (id) => {
          running++;
          peak = Math.max(peak, running);
          await gate.promise;
          running--;
          return { id };
        },
      },
    });
    const t = store.table(table);
    const reads = Array.from({ length: 8 }, (_, i) =>
      t.get(`id-${i}`).then(
        (r) => r.found,
        (e: { code: string }) => e.code,
      ),
    );
    await vi.waitFor(() => {
      expect(t.stats().loads_active).toBe(2);
      expect(t.stats().loads_queued).toBe(3);
    });
    gate.resolve();
    const outcomes = await Promise.all(reads);
    expect(outcomes.filter((o) => o === true)).toHaveLength(5);
    expect(outcomes.filter((o) => o === 'ECC_SHED')).toHaveLength(3);
    expect(peak).toBe(2);
    expect(await metricValue(store, 'echostore_shed_total', table)).toBe(3);
    expect(t.stats().loads_active + t.stats().loads_queued).toBe(0);
  });

  it('sheds a queued load that waited leaseMs − loadTimeoutMs, so its lease cannot expire under it', async () => {
    const table = uniqueTable('queue-wait');
    const gate = deferred<void>();
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 1,
        loadTimeoutMs: 1_000,
        leaseMs: 1_200,
        load: async (id) => {
          await gate.promise;
          return { id };
        },
      },
    });
    const t = store.table(table);
    const first = t.get('a');
    await vi.waitFor(() => expect(t.stats().loads_active).toBe(1));
    const started = performance.now();
    const queued = await errorOf(t.get('b'));
    expect(queued.code).toBe('ECC_SHED');
    expect(performance.now() - started).toBeGreaterThanOrEqual(150);
    gate.resolve();
    expect((await first).found).toBe(true);
  });

  it('caps the callers waiting on one flight at maxWaitersPerFlight', async () => {
    const table = uniqueTable('waiters');
    const gate = deferred<void>();
    const store = await openStore({
      [table]: {
        maxWaitersPerFlight: 5,
        load: async (id) => {
          await gate.promise;
          return { id };
        },
      },
    });
    const t = store.table(table);
    const reads = Array.from({ length: 8 }, () =>
      t.get('hot').then(
        () => 'ok',
        (e: { code: string }) => e.code,
      ),
    );
    await vi.waitFor(() => expect(t.stats().coalesced).toBe(4));
    gate.resolve();
    const outcomes = await Promise.all(reads);
    expect(outcomes.filter((o) => o === 'ok')).toHaveLength(5);
    expect(outcomes.filter((o) => o === 'ECC_SHED')).toHaveLength(3);
  });

  it('answers no caller later than waitTimeoutMs; the flight still fills the cache for the next caller', async () => {
    const table = uniqueTable('wait-cap');
    let loads = 0;
    const store = await openStore({
      [table]: {
        waitTimeoutMs: 150,
        loadTimeoutMs: 2_000,
        leaseMs: 3_000,
        load: async (id) => {
          loads++;
          await new Promise((r) => setTimeout(r, 400));
          return { id };
        },
      },
    });
    const t = store.table(table);
    const started = performance.now();
    const errors = await Promise.all(Array.from({ length: 10 }, () => errorOf(t.get('slow'))));
    const elapsedMs = performance.now() - started;
    expect(errors.every((e) => e.code === 'ECC_WAIT_TIMEOUT')).toBe(true);
    expect(elapsedMs).toBeLessThan(390);
    await vi.waitFor(() => expect(t.stats().l1_entries).toBe(1), { timeout: 2_000 });
    const later = await t.get('slow');
    expect(later.found && later.layer).toBe('l1');
    expect(loads).toBe(1);
  });
});
