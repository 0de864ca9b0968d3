// @module-tag cluster (a law test: npm run test:cluster runs it again on a local 3+3 cluster)
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { valueKey } from '../src/index.js';
import { errorOf, isTombstone, openStore, rawValkey, readEnvelope } from './helpers/probe.js';
import { deferred, delay, uniqueTable } from './helpers/store.js';

describe('single-flight', () => {
  let raw: Redis;
  beforeAll(() => {
    raw = rawValkey();
  });
  afterAll(() => raw.quit());

  it('200 concurrent cold readers cause one load, 199 coalesced, one distinct answer', async () => {
    const table = uniqueTable('herd');
    const gate = deferred<void>();
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: async (id) => {
          loads++;
          await gate.promise;
          return { id, n: loads, at: Date.now() };
        },
      },
    });
    const t = store.table(table);
    const readers = Array.from({ length: 200 }, () => t.get('cold-1'));
    await vi.waitFor(() => expect(t.stats().coalesced).toBe(199));
    gate.resolve();
    const results = await Promise.all(readers);
    expect(loads).toBe(1);
    expect(t.stats().coalesced).toBe(199);
    expect(t.stats().loads).toBe(1);
    const answers = new Set(results.map((r) => (r.found ? r.json : 'missing')));
    expect(answers.size).toBe(1);
    expect(results.filter((r) => r.coalesced)).toHaveLength(199);
    expect(results.every((r) => r.layer === 'origin')).toBe(true);
  });

  it('a miss that reaches the owner while its id loads joins the running flight: one load for two bursts of 100 readers', async () => {
    const table = uniqueTable('herd-late');
    const gate = deferred<void>();
    const started = deferred<void>();
    let loads = 0;
    const store = await openStore({
      [table]: {
        // No lease to fall back on: only the owner's flight keeps the second burst from loading.
        coalescing: 'process',
        load: async (id) => {
          loads++;
          started.resolve();
          await gate.promise;
          return { id, n: loads };
        },
      },
    });
    const t = store.table(table);
    const first = Array.from({ length: 100 }, () => t.get('cold-2'));
    await started.promise;
    // The owner has handled the first burst's miss message; this burst posts a second one.
    const second = Array.from({ length: 100 }, () => t.get('cold-2'));
    await vi.waitFor(() => expect(t.stats().coalesced).toBe(199));
    gate.resolve();
    const results = await Promise.all([...first, ...second]);
    expect(loads).toBe(1);
    expect(new Set(results.map((r) => (r.found ? r.json : 'missing')))).toEqual(
      new Set([JSON.stringify({ id: 'cold-2', n: 1 })]),
    );
  });

  it('a loader that throws synchronously fails every waiter with ECC_LOAD_FAILED', async () => {
    const table = uniqueTable('sync-throw');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: () => {
          loads++;
          throw new Error('synchronous failure');
        },
      },
    });
    const t = store.table(table);
    const errors = await Promise.all(Array.from({ length: 10 }, () => errorOf(t.get('x'))));
    expect(loads).toBe(1);
    for (const e of errors) expect(e.code).toBe('ECC_LOAD_FAILED');
  });

  it('a rejection reaches all 50 waiters as the same error, writes nothing, and the next call loads again', async () => {
    const table = uniqueTable('reject');
    const gate = deferred<void>();
    const original = new Error('source down');
    let loads = 0;
    const store = await openStore({
      [table]: {
        // Failures not remembered (errorTtlMs: 0): the next call loads again at once.
        errorTtlMs: 0,
        load: async (id) => {
          loads++;
          if (loads === 1) {
            await gate.promise;
            throw original;
          }
          return { id, ok: true };
        },
      },
    });
    const t = store.table(table);
    const waiters = Array.from({ length: 50 }, () => errorOf(t.get('r1')));
    await vi.waitFor(() => expect(loads).toBe(1));
    gate.resolve();
    const errors = await Promise.all(waiters);

    expect(loads).toBe(1);
    const first = errors[0];
    expect(first?.code).toBe('ECC_LOAD_FAILED');
    expect(first?.cause).toBe(original);
    for (const e of errors) expect(e).toBe(first);
    expect(await raw.exists(valueKey(table, 'r1'))).toBe(0);
    expect(t.stats().l1_entries).toBe(0);
    expect(t.stats().flights).toBe(0);

    const retry = await t.get('r1');
    expect(loads).toBe(2);
    expect(retry).toMatchObject({ found: true, value: { id: 'r1', ok: true }, layer: 'origin' });
  });

  it.each([
    ['a BigInt', () => ({ n: 1n })],
    [
      'a cycle',
      () => {
        const o: Record<string, unknown> = { a: 1 };
        o.self = o;
        return o;
      },
    ],
  ])('a loaded value with %s fails every waiter with ECC_BAD_VALUE', async (_, make) => {
    const table = uniqueTable('bad-value');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: async () => {
          loads++;
          return make();
        },
      },
    });
    const t = store.table(table);
    const errors = await Promise.all(Array.from({ length: 10 }, () => errorOf(t.get('v'))));
    expect(loads).toBe(1);
    for (const e of errors) expect(e.code).toBe('ECC_BAD_VALUE');
    expect(await raw.exists(valueKey(table, 'v'))).toBe(0);
    expect(t.stats().l1_entries).toBe(0);
  });

  it('a flight is removed by identity: a superseded flight landing leaves the newer flight in place', async () => {
    const table = uniqueTable('identity');
    const gates = [deferred<void>(), deferred<void>()];
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: async () => {
          const n = loads++;
          const gate = gates[n];
          if (gate === undefined) throw new Error(`unexpected load #${n + 1}`);
          await gate.promise;
          return { n };
        },
      },
    });
    const t = store.table(table);

    const get1 = t.get('k');
    await vi.waitFor(() => expect(loads).toBe(1));
    await t.invalidate('k');
    const get2 = t.get('k');
    await vi.waitFor(() => expect(loads).toBe(2));
    expect(t.stats().flights).toBe(1);

    gates[0]?.resolve();
    expect(await get1).toMatchObject({ found: true, value: { n: 0 } });
    expect(t.stats().flights).toBe(1);
    // The superseded flight wrote nothing: neither L1 nor L2.
    expect(t.stats().l1_entries).toBe(0);
    // L2 holds only the DELETE's tombstone: a "not found" that is never fresh.
    expect(isTombstone(await readEnvelope(raw, table, 'k'))).toBe(true);

    const get3 = t.get('k');
    await vi.waitFor(() => expect(t.stats().coalesced).toBe(1));

    gates[1]?.resolve();
    const [r2, r3] = await Promise.all([get2, get3]);
    expect(r2).toMatchObject({ found: true, value: { n: 1 }, coalesced: false });
    expect(r3).toMatchObject({ found: true, value: { n: 1 }, coalesced: true });
    expect(loads).toBe(2);
    expect(t.stats().flights).toBe(0);

    const after = await t.get('k');
    expect(after).toMatchObject({ found: true, value: { n: 1 }, layer: 'l1' });
  });
  it("coalescing 'none' loads once per caller, even for callers of one id in one tick", async () => {
    const table = uniqueTable('none');
    let loads = 0;
    const store = await openStore({
      [table]: {
        coalescing: 'none',
        load: async (id) => {
          loads++;
          await delay(20);
          return { id };
        },
      },
    });
    const t = store.table(table);
    const results = await Promise.all(Array.from({ length: 10 }, () => t.get('same')));
    expect(loads).toBe(10);
    expect(results.every((r) => r.found && !r.coalesced)).toBe(true);
    expect(t.stats().coalesced).toBe(0);
  });
});
