import { describe, expect, it, vi } from 'vitest';
import type { ShedError } from '../src/errors.js';
import { errorOf, metricValue, openStore } from './helpers/probe.js';
import { deferred, delay, uniqueTable } from './helpers/store.js';

/** 'ok' when `p` resolves, else the code it rejects with. */
const outcome = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (e: { code: string }) => e.code,
  );

describe('shedding and bounded waiting', () => {
  it('queues loads beyond the load limit; maxQueuedLoads bounds the queue (memory), beyond it ECC_SHED', async () => {
    const table = uniqueTable('queue');
    const gate = deferred<void>();
    let running = 0;
    let peak = 0;
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 2,
        maxQueuedLoads: 3,
        maxQueueDelayMs: 10_000,
        loadTimeoutMs: 5_000,
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
    await vi.waitFor(() => expect(t.stats()).toMatchObject({ loads_active: 2, loads_queued: 3 }));
    gate.resolve();
    const outcomes = await Promise.all(reads);
    expect(outcomes.filter((o) => o === true)).toHaveLength(5);
    expect(outcomes.filter((o) => o === 'ECC_SHED')).toHaveLength(3);
    expect(peak).toBe(2);
    expect(await metricValue(store, 'echostore_shed_total', table)).toBe(3);
    expect(t.stats().loads_active + t.stats().loads_queued).toBe(0);
  });

  it('sheds a queued load that has waited maxQueueDelayMs', async () => {
    const table = uniqueTable('queue-wait');
    const gate = deferred<void>();
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 1,
        maxQueueDelayMs: 150,
        // The pool alone: held loads never leave it for the overdue partition (hanging-ids.test.ts).
        maxOverdueLoads: 0,
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
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    gate.resolve();
    expect((await first).found).toBe(true);
  });

  it('sheds at once, with a retry hint, a load whose predicted wait exceeds maxQueueDelayMs', async () => {
    const table = uniqueTable('queue-predict');
    const gates: Array<ReturnType<typeof deferred<void>>> = [];
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 1,
        maxQueueDelayMs: 2_600,
        load: async (id) => {
          if (id === 'warm') {
            await delay(400);
            return { id };
          }
          const gate = deferred<void>();
          gates.push(gate);
          await gate.promise;
          return { id };
        },
      },
    });
    const t = store.table(table);
    await t.get('warm'); // the table learns that a load takes ~400 ms
    const running = t.get('a');
    await vi.waitFor(() => expect(t.stats().loads_active).toBe(1));
    // A steady source (limit at its ceiling): predicted waits 1 × 400 ms … 4 × 400 ms, each plus
    // one load (400 ms) for the running load's phase, fit in 80 % of the bound (2,080 ms of
    // 2,600; two of them are past half of it): queued; the fifth, 2,000 + 400 ms: shed.
    const queued = ['b', 'c', 'd', 'e'].map((id) => t.get(id));
    await vi.waitFor(() => expect(t.stats().loads_queued).toBe(4));
    const shed = await errorOf(t.get('f'));
    // Shed while the running load is still held: at once, not after a wait.
    expect(gates).toHaveLength(1);
    expect(shed.code).toBe('ECC_SHED');
    expect((shed as ShedError).retryAfterMs).toBeGreaterThanOrEqual(2_600);
    for (let i = 0; i < 5; i++) {
      await vi.waitFor(() => expect(gates.length).toBeGreaterThan(i));
      gates[i]?.resolve();
    }
    expect((await Promise.all([running, ...queued])).every((r) => r.found)).toBe(true);
  });

  it('keeps the slot of a timed-out load until the loader settles: a stalled source that ignores the abort never runs more than maxConcurrentLoads loads', async () => {
    const table = uniqueTable('bulkhead');
    const gates: Array<ReturnType<typeof deferred<void>>> = [];
    let running = 0;
    let peak = 0;
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 2,
        loadTimeoutMs: 100,
        maxQueueDelayMs: 300,
        // The pool alone: held loads never leave it for the overdue partition (hanging-ids.test.ts).
        maxOverdueLoads: 0,
        // Counted at the source: a loader that ignores its signal and answers only when let go.
        load: async (id) => {
          if (id === 'after') return { id };
          running++;
          peak = Math.max(peak, running);
          const gate = deferred<void>();
          gates.push(gate);
          await gate.promise;
          running--;
          return { id };
        },
      },
    });
    const t = store.table(table);
    // New ids for a second, each well past the previous one's timeout.
    const codes: Array<Promise<string>> = [];
    for (let i = 0; i < 8; i++) {
      codes.push(outcome(t.get(`stalled-${i}`)));
      await delay(130);
    }
    const answered = await Promise.all(codes);
    expect(peak).toBe(2);
    expect(answered.every((c) => c === 'ECC_LOAD_TIMEOUT' || c === 'ECC_SHED')).toBe(true);
    expect(answered).toContain('ECC_SHED');
    expect(t.stats().loads_active).toBe(2);
    // The source recovers: the stalled loads settle, their slots come back.
    for (const gate of gates) gate.resolve();
    await vi.waitFor(() => expect(t.stats().loads_active).toBe(0));
    expect(await t.get('after')).toMatchObject({ found: true });
  });

  it('one id the source keeps refusing halves the load limit once, not on every retry: other ids are not shed for it', async () => {
    const table = uniqueTable('poison');
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 16,
        load: async (id) => {
          await delay(5);
          if (id === 'poison') throw new Error('row 7 is corrupt');
          return { id };
        },
      },
    });
    const t = store.table(table);
    for (let i = 0; i < 20; i++)
      expect((await errorOf(t.get('poison'))).code).toBe('ECC_LOAD_FAILED');
    expect(t.stats().load_limit).toBe(8);
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => t.get(`ok-${i}`)));
    expect(answers.every((a) => a.found)).toBe(true);
  });

  it('gives a healthy source more than initialConcurrentLoads under a burst: the limit grows while loads stay fast, none is shed', async () => {
    const table = uniqueTable('grow');
    let running = 0;
    let peak = 0;
    let highestLimit = 0;
    const store = await openStore({
      [table]: {
        initialConcurrentLoads: 4,
        maxConcurrentLoads: 64,
        load: async (id) => {
          running++;
          peak = Math.max(peak, running);
          highestLimit = Math.max(highestLimit, t.stats().load_limit);
          // 40 ms: a busy machine's scheduling delay stays well inside the 2 × tolerance.
          await delay(40);
          running--;
          return { id };
        },
      },
    });
    const t = store.table(table);
    expect(t.stats().load_limit).toBe(4);
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => t.get(`g-${i}`)));
    expect(answers.every((a) => a.found)).toBe(true);
    // Counted at the source: more than the limit it started at, never more than the ceiling.
    expect(peak).toBeGreaterThan(4);
    expect(peak).toBeLessThanOrEqual(64);
    // Seen while the burst ran (once it has drained, a withdrawn headroom is no failure).
    expect(highestLimit).toBeGreaterThan(4);
    expect(await metricValue(store, 'echostore_shed_total', table)).toBe(0);
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
    // One caller per tick: callers in one tick would share one read (attached or shed whole).
    const reads: Promise<string>[] = [];
    for (let i = 0; i < 8; i++) {
      reads.push(outcome(t.get('hot')));
      await new Promise((r) => setImmediate(r));
    }
    await vi.waitFor(() => expect(t.stats().coalesced).toBe(4));
    gate.resolve();
    const outcomes = await Promise.all(reads);
    expect(outcomes.filter((o) => o === 'ok')).toHaveLength(5);
    expect(outcomes.filter((o) => o === 'ECC_SHED')).toHaveLength(3);
  });

  it('callers of one id in one tick share one read, attached or shed whole at maxWaitersPerFlight', async () => {
    const table = uniqueTable('joined');
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
    // Tick 1: one caller launches the flight, three join its message (4 callers).
    const first = Array.from({ length: 4 }, () => outcome(t.get('hot')));
    expect(t.stats().mailbox_depth).toBe(1);
    await new Promise((r) => setImmediate(r));
    // Tick 2: one caller fits (5), the three that join its message would not: shed together.
    const second = Array.from({ length: 4 }, () => outcome(t.get('hot')));
    await new Promise((r) => setImmediate(r));
    gate.resolve();
    expect(await Promise.all(first)).toEqual(['ok', 'ok', 'ok', 'ok']);
    expect(await Promise.all(second)).toEqual(['ok', 'ECC_SHED', 'ECC_SHED', 'ECC_SHED']);
    expect(t.stats().coalesced).toBe(4);
    expect(t.stats().misses).toBe(8);
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
          await delay(400);
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
