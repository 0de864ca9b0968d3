import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStore, type Store } from '../src/index.js';
import { deferred, uniqueTable, valkeyUrl } from './helpers/store.js';

describe('single-flight', () => {
  let store: Store;
  const table = uniqueTable('herd');
  let loads = 0;
  const gate = deferred<void>();

  beforeAll(async () => {
    store = await createStore({
      valkey: valkeyUrl(),
      tables: {
        [table]: {
          load: async (id) => {
            loads++;
            await gate.promise;
            return { id, n: loads, at: Date.now() };
          },
        },
      },
    });
  });
  afterAll(() => store.close());

  it('200 concurrent cold readers cause one load, 199 coalesced, one distinct answer', async () => {
    const t = store.table(table);
    const readers = Array.from({ length: 200 }, () => t.get('cold-1'));
    setTimeout(() => gate.resolve(), 20);
    const results = await Promise.all(readers);
    expect(loads).toBe(1);
    expect(t.stats().coalesced).toBe(199);
    expect(t.stats().fills).toBe(1);
    const answers = new Set(results.map((r) => (r.found ? r.json : 'missing')));
    expect(answers.size).toBe(1);
    expect(results.filter((r) => r.coalesced)).toHaveLength(199);
    expect(results.every((r) => r.source === 'source')).toBe(true);
  });
});
