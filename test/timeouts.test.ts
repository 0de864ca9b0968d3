import type { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ShedError, valueKey } from '../src/index.js';
import { errorOf, metricValue, openStore, rawValkey } from './helpers/probe.js';
import { deferred, uniqueTable } from './helpers/store.js';

/** A promise that never settles: a loader stuck on a dead source. */
const never = () => new Promise<never>(() => {});

describe('load timeouts, shedding and close', () => {
  let raw: Redis;
  beforeAll(() => {
    raw = rawValkey();
  });
  afterAll(() => raw.quit());

  it('a loader that never settles fails every waiter with ECC_LOAD_TIMEOUT and its signal is aborted', async () => {
    const table = uniqueTable('to-never');
    let signal: AbortSignal | undefined;
    let loads = 0;
    const store = await openStore({
      [table]: {
        loadTimeoutMs: 100,
        leaseMs: 200,
        load: (_id, ctx) => {
          loads++;
          signal = ctx.signal;
          return never();
        },
      },
    });
    const t = store.table(table);
    const started = performance.now();
    const errors = await Promise.all(Array.from({ length: 5 }, () => errorOf(t.get('n'))));
    expect(performance.now() - started).toBeGreaterThanOrEqual(90);
    expect(loads).toBe(1);
    for (const e of errors) {
      expect(e.code).toBe('ECC_LOAD_TIMEOUT');
      expect(e).toBe(errors[0]);
    }
    expect(signal?.aborted).toBe(true);
    expect(signal?.reason).toMatchObject({ code: 'ECC_LOAD_TIMEOUT' });
    expect(t.stats().flights).toBe(0);
  });

  it('a loader that ignores its aborted signal keeps its slot, and a warning says so once it has not settled loadTimeoutMs later', async () => {
    const table = uniqueTable('to-stuck');
    const lines: Array<{ level: number; msg: string; table?: string; id?: string }> = [];
    const logger = pino(
      { level: 'warn' },
      { write: (l: string) => void lines.push(JSON.parse(l)) },
    );
    const store = await openStore(
      {
        [table]: {
          loadTimeoutMs: 100,
          leaseMs: 200,
          maxConcurrentLoads: 1,
          // The pool alone: the stuck load never leaves it for the overdue partition.
          maxOverdueLoads: 0,
          load: () => never(),
        },
      },
      { logger },
    );
    const t = store.table(table);
    expect((await errorOf(t.get('stuck'))).code).toBe('ECC_LOAD_TIMEOUT');
    expect(t.stats().loads_active).toBe(1);
    await vi.waitFor(() =>
      expect(lines.find((l) => l.id === 'stuck')?.msg).toMatch(
        /has not settled 100 ms after its timeout/,
      ),
    );
    expect((await errorOf(t.get('next'))).code).toBe('ECC_SHED');
  });

  it('a result that lands after the timeout is discarded and counted; the next get loads again', async () => {
    const table = uniqueTable('to-late');
    const late = deferred<unknown>();
    let loads = 0;
    const store = await openStore({
      [table]: {
        loadTimeoutMs: 100,
        leaseMs: 200,
        load: (id) => {
          loads++;
          return loads === 1 ? late.promise : { id, fresh: true };
        },
      },
    });
    const t = store.table(table);
    expect((await errorOf(t.get('l'))).code).toBe('ECC_LOAD_TIMEOUT');
    expect(await metricValue(store, 'echostore_late_loads_total', table)).toBe(0);

    late.resolve({ id: 'l', late: true });
    await vi.waitFor(async () =>
      expect(await metricValue(store, 'echostore_late_loads_total', table)).toBe(1),
    );
    expect(await raw.exists(valueKey(table, 'l'))).toBe(0);
    expect(t.stats().l1_entries).toBe(0);

    expect(await t.get('l')).toMatchObject({
      found: true,
      layer: 'origin',
      value: { fresh: true },
    });
    expect(loads).toBe(2);
  });

  it('past maxConcurrentLoads a cold id is shed with ECC_SHED and a retryAfterMs', async () => {
    const table = uniqueTable('shed');
    const gate = deferred<void>();
    let loads = 0;
    const store = await openStore({
      [table]: {
        maxConcurrentLoads: 1,
        // The pool alone: held loads never leave it for the overdue partition (hanging-ids.test.ts).
        maxOverdueLoads: 0,
        load: async (id) => {
          loads++;
          await gate.promise;
          return { id };
        },
      },
    });
    const t = store.table(table);
    const first = t.get('a');
    await vi.waitFor(() => expect(loads).toBe(1));

    const shed = await errorOf(t.get('b'));
    expect(shed.code).toBe('ECC_SHED');
    expect(shed).toBeInstanceOf(ShedError);
    expect((shed as ShedError).retryAfterMs).toBeGreaterThan(0);
    expect(loads).toBe(1);
    expect(await metricValue(store, 'echostore_shed_total', table)).toBe(1);

    gate.resolve();
    expect(await first).toMatchObject({ found: true, value: { id: 'a' } });
    // Capacity is back once the running load finished.
    expect(await t.get('b')).toMatchObject({ found: true, value: { id: 'b' } });
  });

  it('close(graceMs) fails the waiters of a hanging load with ECC_CLOSED and aborts its signal', async () => {
    const table = uniqueTable('close');
    let signal: AbortSignal | undefined;
    let loads = 0;
    const store = await openStore({
      [table]: {
        loadTimeoutMs: 10_000,
        leaseMs: 11_000,
        load: (_id, ctx) => {
          loads++;
          signal = ctx.signal;
          return never();
        },
      },
    });
    const t = store.table(table);
    const waiters = Array.from({ length: 3 }, () => errorOf(t.get('h')));
    await vi.waitFor(() => expect(loads).toBe(1));

    await store.close(100);
    for (const e of await Promise.all(waiters)) expect(e.code).toBe('ECC_CLOSED');
    expect(signal?.aborted).toBe(true);
    expect(signal?.reason).toMatchObject({ code: 'ECC_CLOSED' });

    expect((await errorOf(t.get('cold'))).code).toBe('ECC_CLOSED');
    expect((await errorOf(t.put('cold', 1))).code).toBe('ECC_CLOSED');
    expect(loads).toBe(1);
  });
});
