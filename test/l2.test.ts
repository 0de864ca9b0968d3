// @module-tag cluster (a law test: npm run test:cluster runs it again on a local 3+3 cluster)
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStore, leaseKey, valueKey, withPolicy } from '../src/index.js';
import type { Envelope } from '../src/l2/format.js';
import {
  errorOf,
  isTombstone,
  landed,
  metricValue,
  openStore,
  rawValkey,
  readEnvelope,
} from './helpers/probe.js';
import { uniqueTable, valkeyTarget } from './helpers/store.js';

describe('L2', () => {
  let raw: Redis;
  beforeAll(() => {
    raw = rawValkey();
  });
  afterAll(() => raw.quit());

  it('a rebuilt store answers from L2 without calling its loader', async () => {
    const table = uniqueTable('l2-rebuild');
    const first = await createStore({
      valkey: valkeyTarget(),
      tables: { [table]: { load: (id) => ({ id, from: 'source' }) } },
    });
    const loaded = await first.table(table).get('p1');
    expect(loaded.layer).toBe('origin');
    await first.close();

    let loads = 0;
    const second = await openStore({
      [table]: {
        load: () => {
          loads++;
          throw new Error('the source must not be read');
        },
      },
    });
    const t = second.table(table);
    const r = await t.get('p1');
    expect(r).toMatchObject({ found: true, layer: 'l2', value: { id: 'p1', from: 'source' } });
    expect(r.version).toBe(loaded.version);
    expect(loads).toBe(0);
    expect(t.stats().l2_hits).toBe(1);
  });

  it('the hard TTL (PTTL) is ttlMs + staleMs, jittered by up to (1 + jitter)', async () => {
    const table = uniqueTable('l2-pttl');
    const ttlMs = 10_000;
    const staleMs = 5_000;
    const jitter = 0.2;
    const store = await openStore({
      [table]: { ttlMs, staleMs, jitter, load: (id) => ({ id }) },
    });
    const t = store.table(table);
    const pttls: number[] = [];
    for (let i = 0; i < 20; i++) {
      const id = `id-${i}`;
      await t.get(id);
      await landed(raw, valueKey(table, id));
      pttls.push(await raw.pttl(valueKey(table, id)));
    }
    const hardMs = ttlMs + staleMs;
    for (const pttl of pttls) {
      expect(pttl).toBeGreaterThanOrEqual(hardMs - 1_000);
      expect(pttl).toBeLessThanOrEqual(hardMs * (1 + jitter));
    }
    // Jitter spreads expiries: 20 uniform draws over 3,000 ms do not all land within 100 ms.
    expect(Math.max(...pttls) - Math.min(...pttls)).toBeGreaterThan(100);
  });

  it('without jitter the hard TTL is ttlMs + staleMs', async () => {
    const table = uniqueTable('l2-pttl0');
    const store = await openStore({
      [table]: { ttlMs: 10_000, staleMs: 5_000, jitter: 0, load: (id) => ({ id }) },
    });
    await store.table(table).get('a');
    await landed(raw, valueKey(table, 'a'));
    const pttl = await raw.pttl(valueKey(table, 'a'));
    expect(pttl).toBeLessThanOrEqual(15_000);
    expect(pttl).toBeGreaterThanOrEqual(15_000 - 250);
  });

  it('the stored value is the E3 header (version, expiries, deltaMs, flags, born, fingerprint, tags) and the JSON', async () => {
    const table = uniqueTable('l2-envelope');
    const store = await openStore({
      [table]: { ttlMs: 60_000, load: (id) => ({ id, tags: ['a', 'b'] }) },
    });
    const before = Date.now();
    const r = await store.table(table).get('e1');
    const text = (await raw.get(valueKey(table, 'e1'))) as string;
    expect(text).toMatch(/^E3\|\d+\|\d+\|\d+\|\d+\|0\|\d+\|\|\|\{"id":"e1","tags":\["a","b"\]\}$/);
    const envelope = (await readEnvelope(raw, table, 'e1')) as Envelope;
    expect(envelope).toEqual({
      value: { id: 'e1', tags: ['a', 'b'] },
      json: '{"id":"e1","tags":["a","b"]}',
      version: r.version,
      softExpiresAt: expect.any(Number),
      hardExpiresAt: expect.any(Number),
      deltaMs: expect.any(Number),
      negative: false,
      born: expect.any(Number),
      fingerprint: '',
    });
    // born: when the load started, on Valkey's clock (µs), before the fill's version.
    expect(envelope.born).toBeLessThanOrEqual(r.version);
    expect(envelope.softExpiresAt).toBeGreaterThan(before + 50_000);
    // hard = soft + staleMs (60 s) × the same jitter factor (1 to 1.2)
    expect(envelope.hardExpiresAt - envelope.softExpiresAt).toBeGreaterThanOrEqual(60_000);
    expect(envelope.hardExpiresAt - envelope.softExpiresAt).toBeLessThanOrEqual(72_000);
    expect(envelope.deltaMs).toBeGreaterThanOrEqual(0);
  });

  it('an undecodable envelope is a miss: the loader runs, the key is overwritten, and it is counted', async () => {
    const table = uniqueTable('l2-garbage');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: (id) => {
          loads++;
          return { id, fresh: true };
        },
      },
    });
    const t = store.table(table);
    await raw.set(valueKey(table, 'garbage'), 'not json {', 'PX', 60_000);
    // The JSON envelope of the format before E2 (and E3): a miss, reloaded, never a crash.
    await raw.set(
      valueKey(table, 'older'),
      JSON.stringify({
        v: 1,
        version: 1,
        softExpiresAt: Date.now() + 60_000,
        deltaMs: 1,
        value: { id: 'older' },
      }),
      'PX',
      60_000,
    );
    await raw.set(
      valueKey(table, 'bad-json'),
      `E3|1|${Date.now() + 60_000}|0|1|0|0|||{oops`,
      'PX',
      60_000,
    );

    for (const id of ['garbage', 'older', 'bad-json']) {
      const r = await t.get(id);
      expect(r).toMatchObject({ found: true, layer: 'origin', value: { id, fresh: true } });
      const stored = await readEnvelope(raw, table, id);
      expect(stored).toMatchObject({ value: { id, fresh: true }, version: r.version });
    }
    expect(loads).toBe(3);
    expect(await metricValue(store, 'echostore_bad_envelopes_total', table)).toBe(3);
  });

  it('negative caching: undefined from the loader is "not found", answered from L1 next time', async () => {
    const table = uniqueTable('l2-negative');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: () => {
          loads++;
          return undefined;
        },
      },
    });
    const t = store.table(table);
    expect(await t.get('ghost')).toMatchObject({ found: false, layer: 'origin' });
    expect(await t.get('ghost')).toMatchObject({ found: false, layer: 'l1' });
    expect(loads).toBe(1);
    expect(await readEnvelope(raw, table, 'ghost')).toMatchObject({ value: null, negative: true });
  });

  it('put writes the envelope to L2 with the returned version, and to L1', async () => {
    const table = uniqueTable('l2-put');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: () => {
          loads++;
          return { from: 'source' };
        },
      },
    });
    const t = store.table(table);
    const { version } = await t.put('p', { from: 'put' });
    expect(await readEnvelope(raw, table, 'p')).toMatchObject({ value: { from: 'put' }, version });
    expect(await t.get('p')).toMatchObject({
      found: true,
      layer: 'l1',
      value: { from: 'put' },
      version,
    });
    expect(loads).toBe(0);
  });

  it('put refuses a value that is not JSON or a withPolicy wrapper with ECC_BAD_VALUE, writing nothing', async () => {
    const table = uniqueTable('l2-put-bad');
    const store = await openStore({ [table]: { load: () => ({ from: 'source' }) } });
    const t = store.table(table);
    for (const value of [{ n: 1n }, withPolicy({ a: 1 }, { tags: ['t'] })]) {
      expect((await errorOf(t.put('p', value))).code).toBe('ECC_BAD_VALUE');
    }
    expect(await readEnvelope(raw, table, 'p')).toBeNull();
  });

  it('invalidate replaces the value with a tombstone, deletes the lease key and the L1 row', async () => {
    const table = uniqueTable('l2-invalidate');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: (id) => {
          loads++;
          return { id, n: loads };
        },
      },
    });
    const t = store.table(table);
    await t.get('i');
    await landed(raw, valueKey(table, 'i'));
    await raw.set(leaseKey(table, 'i'), 'someone-elses-token', 'PX', 60_000);
    expect(await raw.exists(valueKey(table, 'i'), leaseKey(table, 'i'))).toBe(2);
    expect((await t.get('i')).layer).toBe('l1');

    await t.invalidate('i');
    const tombstone = await readEnvelope(raw, table, 'i');
    expect(isTombstone(tombstone)).toBe(true);
    const pttl = await raw.pttl(valueKey(table, 'i'));
    expect(pttl).toBeGreaterThan(60_000);
    expect(pttl).toBeLessThanOrEqual(65_000);
    expect(await raw.exists(leaseKey(table, 'i'))).toBe(0);
    expect(t.stats().l1_entries).toBe(0);

    expect(await t.get('i')).toMatchObject({
      found: true,
      layer: 'origin',
      value: { id: 'i', n: 2 },
    });
    expect(loads).toBe(2);
  });
});
