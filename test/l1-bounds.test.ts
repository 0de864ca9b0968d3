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
    const big = { blob: 'x'.repeat(1_000) };
    let loads = 0;
    const store = await openStore({
      [table]: {
        l1: { maxBytes: 8_192 },
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

  it('l1.maxBytes counts heap bytes: a non-ASCII text costs two bytes per UTF-16 unit', async () => {
    const table = uniqueTable('l1-heap');
    // The row limit is 1 024 bytes (an eighth of 8 KiB). 400 ASCII characters
    // take 400 bytes of heap and fit beside the row's overhead; 400 × '€'
    // (a two-byte string in V8) take 800 bytes and do not.
    const store = await openStore({
      [table]: { l1: { maxBytes: 8_192 }, load: (id) => (id === 'e' ? '€' : 'a').repeat(400) },
    });
    const t = store.table(table);
    expect(await t.get('a')).toMatchObject({ found: true, value: 'a'.repeat(400) });
    expect(await t.get('e')).toMatchObject({ found: true, value: '€'.repeat(400) });
    expect((await t.get('a')).layer).toBe('l1');
    expect((await t.get('e')).layer).toBe('l2');
    expect(t.stats().l1_entries).toBe(1);
  });

  it('l1.maxBytes bounds the bytes held: rows are evicted to make room', async () => {
    const table = uniqueTable('l1-bytes');
    const store = await openStore({
      [table]: { l1: { maxBytes: 8_192 }, load: (id) => ({ id, pad: 'p'.repeat(200) }) },
    });
    const t = store.table(table);
    for (let i = 0; i < 100; i++) await t.get(`id-${i}`);
    const { l1_entries, l1_bytes } = t.stats();
    expect(l1_bytes).toBeLessThanOrEqual(8_192);
    // Each row counts its overhead and its strings: 8 KiB holds a dozen or so.
    expect(l1_entries).toBeGreaterThan(5);
    expect(l1_entries).toBeLessThan(20);
    expect((await t.get('id-99')).layer).toBe('l1');
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
      expect(l1TtlMs).toBeLessThanOrEqual(1_200);
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
