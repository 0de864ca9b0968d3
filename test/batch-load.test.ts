/**
 * Batched loading (DataLoader-style): a table's `loadMany` gets the misses of
 * one tick as one call, while each id keeps its own flight and waiters.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, createStore, type LoadManyFn } from '../src/index.js';
import { batchingLoader } from '../src/store/batch-load.js';
import { errorOf, openStore } from './helpers/probe.js';
import { deferred, delay, uniqueTable, valkeyUrl } from './helpers/store.js';

/** A `loadMany` over rows `{ id, name }` for the ids in `have`, recording each call's ids. */
function recordingLoadMany(have: (id: string) => boolean = () => true, ms = 0) {
  const calls: string[][] = [];
  const loadMany: LoadManyFn = async (ids) => {
    calls.push([...ids]);
    if (ms > 0) await delay(ms);
    return new Map(ids.filter(have).map((id) => [id, { id, name: `item ${id}` }]));
  };
  return { loadMany, calls };
}

const ids = (n: number, prefix = 'k') => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

/**
 * The store-level tests give a batch 50 ms to fill: with the default window (one turn of the
 * event loop) the Valkey answers of one burst may arrive in two turns and so in two batches.
 */
const WINDOW = { batchWindowMs: 50 };

describe('batched loading', () => {
  it('sends the misses of one window to loadMany as one call, and answers each id with its row', async () => {
    const table = uniqueTable('batch');
    const { loadMany, calls } = recordingLoadMany();
    const store = await openStore({ [table]: { loadMany, ...WINDOW } });
    const t = store.table(table);
    const results = await Promise.all(ids(10).map((id) => t.get(id)));
    expect(calls).toEqual([ids(10)]);
    results.forEach((r, i) => {
      expect(r.found && r.value).toEqual({ id: `k${i}`, name: `item k${i}` });
      expect(r.layer).toBe('origin');
    });
    expect(t.stats().loads).toBe(10);
    // Cached: the next reads never reach the source.
    await Promise.all(ids(10).map((id) => t.get(id)));
    expect(calls).toHaveLength(1);
  });

  it('answers an id the map lacks as not found, and caches that', async () => {
    const table = uniqueTable('batch-missing');
    const { loadMany, calls } = recordingLoadMany((id) => id !== 'gone');
    const store = await openStore({ [table]: { loadMany, ...WINDOW } });
    const t = store.table(table);
    const [gone, here] = await Promise.all([t.get('gone'), t.get('here')]);
    expect(gone.found).toBe(false);
    expect(here.found).toBe(true);
    expect((await t.get('gone')).found).toBe(false);
    expect(calls).toHaveLength(1);
  });

  it('fails only the id mapped to an Error; the others of the batch answer', async () => {
    const table = uniqueTable('batch-error');
    const broken = new Error('row 2 is corrupt');
    const store = await openStore({
      [table]: {
        loadMany: (batch) =>
          new Map<string, unknown>(batch.map((id) => [id, id === 'b' ? broken : { id }])),
        ...WINDOW,
      },
    });
    const t = store.table(table);
    const [a, b, c] = await Promise.allSettled([t.get('a'), t.get('b'), t.get('c')]);
    expect(a.status === 'fulfilled' && a.value.found).toBe(true);
    expect(c.status === 'fulfilled' && c.value.found).toBe(true);
    expect(b.status).toBe('rejected');
    const err = (b as PromiseRejectedResult).reason;
    expect(err.code).toBe('ECC_LOAD_FAILED');
    expect(err.cause).toBe(broken);
  });

  it('fails every id of a rejected batch with ECC_LOAD_FAILED, caches nothing, and loads again next time', async () => {
    const table = uniqueTable('batch-reject');
    let calls = 0;
    const failure = new Error('database down');
    const store = await openStore({
      [table]: {
        loadMany: async (batch) => {
          calls++;
          if (calls === 1) throw failure;
          return new Map(batch.map((id) => [id, { id }]));
        },
        ...WINDOW,
        // Failures not remembered (errorTtlMs: 0): "loads again next time" at once.
        errorTtlMs: 0,
      },
    });
    const t = store.table(table);
    const errors = await Promise.all(['x', 'y', 'z'].map((id) => errorOf(t.get(id))));
    for (const err of errors) {
      expect(err.code).toBe('ECC_LOAD_FAILED');
      expect(err.cause).toBe(failure);
    }
    // (The failed loads halved the admission limit, so the reload may take more than one call.)
    const again = await Promise.all(['x', 'y', 'z'].map((id) => t.get(id)));
    expect(again.every((r) => r.found && r.layer === 'origin')).toBe(true);
    expect(calls).toBeGreaterThanOrEqual(2);
  });

  it('fails the batch when loadMany resolves with something other than a Map', async () => {
    const table = uniqueTable('batch-notmap');
    const store = await openStore({
      [table]: { loadMany: (async () => ({ a: 1 })) as unknown as LoadManyFn },
    });
    const err = await errorOf(store.table(table).get('a'));
    expect(err.code).toBe('ECC_LOAD_FAILED');
    expect(err.cause).toBeInstanceOf(TypeError);
  });

  it('splits a burst into calls of at most maxBatchSize ids', async () => {
    const table = uniqueTable('batch-max');
    const { loadMany, calls } = recordingLoadMany();
    const store = await openStore({ [table]: { loadMany, maxBatchSize: 4, ...WINDOW } });
    const t = store.table(table);
    await Promise.all(ids(10).map((id) => t.get(id)));
    expect(calls.map((c) => c.length).sort()).toEqual([2, 4, 4]);
    expect(calls.flat().sort()).toEqual(ids(10).sort());
  });

  it('gathers misses that arrive apart within batchWindowMs into one call', async () => {
    const table = uniqueTable('batch-window');
    const { loadMany, calls } = recordingLoadMany();
    const store = await openStore({ [table]: { loadMany, batchWindowMs: 200 } });
    const t = store.table(table);
    const first = t.get('early');
    // Apart on purpose (the subject, not a wait for a result): 30 ms into the 200 ms window.
    await delay(30);
    await Promise.all([first, t.get('late')]);
    expect(calls).toEqual([['early', 'late']]);
  });

  it('herd: 200 readers over 50 cold ids → at most 2 source calls for 50 ids, every reader its own row', async () => {
    const table = uniqueTable('batch-herd');
    const { loadMany, calls } = recordingLoadMany(() => true, 20);
    // Each id holds an admission slot from the start: 50 ids need 50.
    const store = await openStore({ [table]: { loadMany, initialConcurrentLoads: 64 } });
    const t = store.table(table);
    const wanted = Array.from({ length: 200 }, (_, i) => `h${i % 50}`);
    const results = await Promise.all(wanted.map((id) => t.get(id)));
    expect(calls.length).toBeLessThanOrEqual(2);
    expect(calls.flat().sort()).toEqual(ids(50, 'h').sort());
    results.forEach((r, i) => {
      expect(r.found && (r.value as { id: string }).id).toBe(wanted[i]);
    });
    expect(t.stats().coalesced).toBe(150);
    expect(t.stats().loads).toBe(50);
  });

  it('puts at most the admission limit of ids in one call: each id holds its own slot', async () => {
    const table = uniqueTable('batch-admission');
    const { loadMany, calls } = recordingLoadMany(() => true, 10);
    const store = await openStore({ [table]: { loadMany, maxConcurrentLoads: 4 } });
    const t = store.table(table);
    await Promise.all(ids(10).map((id) => t.get(id)));
    expect(Math.max(...calls.map((c) => c.length))).toBeLessThanOrEqual(4);
    expect(calls.flat().sort()).toEqual(ids(10).sort());
  });

  it('times out each id at loadTimeoutMs and aborts the call once every id of it has', async () => {
    const table = uniqueTable('batch-timeout');
    const started = deferred<AbortSignal>();
    const store = await openStore({
      [table]: {
        loadMany: (_ids, { signal }) => {
          started.resolve(signal);
          return new Promise(() => {});
        },
        loadTimeoutMs: 100,
        leaseMs: 1_000,
      },
    });
    const t = store.table(table);
    const errors = Promise.all(['p', 'q'].map((id) => errorOf(t.get(id))));
    const signal = await started.promise;
    expect((await errors).map((e) => e.code)).toEqual(['ECC_LOAD_TIMEOUT', 'ECC_LOAD_TIMEOUT']);
    expect(signal.aborted).toBe(true);
  });

  it('by default, gathers the calls of one turn of the event loop into one loadMany call', async () => {
    const { loadMany, calls } = recordingLoadMany();
    const load = batchingLoader(loadMany, { batchWindowMs: 0, maxBatchSize: 100 });
    const signal = new AbortController().signal;
    const first = Promise.all(['a', 'b'].map((id) => load(id, { signal })));
    await Promise.resolve();
    const second = load('c', { signal });
    await Promise.all([first, second]);
    await new Promise((r) => setImmediate(r));
    const last = await load('d', { signal });
    expect(last).toEqual({ id: 'd', name: 'item d' });
    expect(calls).toEqual([['a', 'b', 'c'], ['d']]);
  });

  it('asks an id once per call when two callers of the loader ask it in one window', async () => {
    const { loadMany, calls } = recordingLoadMany();
    const load = batchingLoader(loadMany, { batchWindowMs: 0, maxBatchSize: 100 });
    const signal = new AbortController().signal;
    const [a, b] = await Promise.all([load('same', { signal }), load('same', { signal })]);
    expect(a).toEqual({ id: 'same', name: 'item same' });
    expect(b).toBe(a);
    expect(calls).toEqual([['same']]);
  });

  it('refuses a table with neither load nor loadMany, or a loadMany that is not a function, naming the field', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{}, 'tables.t.load'],
      [{ loadMany: 'SELECT' }, 'tables.t.loadMany'],
      [{ load: 3, loadMany: async () => new Map() }, 'tables.t.load'],
      [{ loadMany: async () => new Map(), maxBatchSize: 0 }, 'tables.t.maxBatchSize'],
    ];
    for (const [options, field] of cases) {
      const err = await errorOf(
        createStore({ valkey: valkeyUrl(), tables: { t: options as never }, readyTimeoutMs: 10 }),
      );
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).field).toBe(field);
    }
  });
});
