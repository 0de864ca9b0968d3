import { describe, expect, it } from 'vitest';
import { openStore } from './helpers/probe.js';
import { uniqueTable } from './helpers/store.js';

describe('L1', () => {
  it('an L1 hit is answered in the caller: no mailbox hop, no miss counted', async () => {
    const table = uniqueTable('l1-hit');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: (id) => {
          loads++;
          return { id };
        },
      },
    });
    const t = store.table(table);
    await t.get('warm');
    const before = t.stats();

    const hit = t.get('warm');
    expect(t.stats().mailbox_depth).toBe(0);
    expect(await hit).toMatchObject({ found: true, value: { id: 'warm' }, layer: 'l1' });
    expect(t.stats().misses).toBe(before.misses);
    expect(t.stats().hits).toBe(before.hits + 1);
    expect(loads).toBe(1);

    const cold = t.get('cold');
    expect(t.stats().mailbox_depth).toBe(1);
    expect(await cold).toMatchObject({ found: true, value: { id: 'cold' }, layer: 'origin' });
    expect(t.stats().misses).toBe(before.misses + 1);
  });

  it('a value larger than an eighth of l1.maxBytes answers every caller but is not kept', async () => {
    const table = uniqueTable('l1-big');
    const big = { blob: 'x'.repeat(200) };
    let loads = 0;
    const store = await openStore({
      [table]: {
        l1: { maxBytes: 1024 },
        load: (id) => {
          loads++;
          return id === 'big' ? big : { id };
        },
      },
    });
    const t = store.table(table);
    const results = await Promise.all(Array.from({ length: 20 }, () => t.get('big')));
    expect(loads).toBe(1);
    for (const r of results) expect(r).toMatchObject({ found: true, value: big });
    expect(t.stats().l1_entries).toBe(0);
    expect(t.stats().l1_bytes).toBe(0);
    expect((await t.get('big')).layer).toBe('l2');

    // Control: a small value is kept.
    await t.get('small');
    expect(t.stats().l1_entries).toBe(1);
    expect((await t.get('small')).layer).toBe('l1');
  });

  it('l1.maxBytes counts UTF-8 bytes, not UTF-16 code units', async () => {
    const table = uniqueTable('l1-utf8');
    // 40 × '€' is 42 code units of JSON but 122 bytes of UTF-8: over the 128-byte row limit with the row overhead.
    const euros = '€'.repeat(40);
    const store = await openStore({
      [table]: { l1: { maxBytes: 1024 }, load: () => euros },
    });
    const t = store.table(table);
    expect(await t.get('e')).toMatchObject({ found: true, value: euros });
    expect(t.stats().l1_entries).toBe(0);
  });

  it('l1.maxEntries bounds the rows held', async () => {
    const table = uniqueTable('l1-entries');
    const store = await openStore({
      [table]: { l1: { maxEntries: 3 }, load: (id) => ({ id }) },
    });
    const t = store.table(table);
    for (let i = 0; i < 10; i++) await t.get(`id-${i}`);
    expect(t.stats().l1_entries).toBeLessThanOrEqual(3);
    expect((await t.get('id-9')).layer).toBe('l1');
    expect((await t.get('id-0')).layer).toBe('l2');
  });

  it('the L1 TTL never exceeds l1.ttlMs × (1 + jitter)', async () => {
    const table = uniqueTable('l1-ttl');
    const store = await openStore({
      [table]: { ttlMs: 60_000, jitter: 0.2, l1: { ttlMs: 1_000 }, load: (id) => ({ id }) },
    });
    const t = store.table(table);
    for (let i = 0; i < 20; i++) {
      const id = `id-${i}`;
      await t.get(id);
      const l1TtlMs = t.l1TtlMs(id);
      expect(l1TtlMs).toBeGreaterThan(0);
      // lru-cache reads a cached clock (ttlResolution), so on a busy machine the
      // remaining TTL can read a few ms high; 25 ms is far below the 200 ms of jitter tested.
      expect(l1TtlMs).toBeLessThanOrEqual(1_200 + 25);
    }
  });

  it('the L1 TTL never exceeds the hard TTL (soft TTL + staleMs)', async () => {
    const table = uniqueTable('l1-hard');
    const store = await openStore({
      [table]: {
        ttlMs: 4_000,
        staleMs: 1_000,
        jitter: 0.2,
        l1: { ttlMs: 30_000 },
        load: (id) => ({ id }),
      },
    });
    const t = store.table(table);
    for (let i = 0; i < 20; i++) {
      const id = `id-${i}`;
      const r = await t.get(id);
      const l1TtlMs = t.l1TtlMs(id);
      expect(l1TtlMs).toBeGreaterThan(0);
      expect(l1TtlMs).toBeLessThanOrEqual(6_000);
      // soft TTL left + staleMs × the same jitter factor (≤ 1.2); lru-cache's cached
      // clock can read a few ms high on a busy machine (as above)
      expect(l1TtlMs).toBeLessThanOrEqual(r.ttlMs + 1_200 + 25);
      expect(l1TtlMs).toBeGreaterThan(r.ttlMs);
    }
  });
});
