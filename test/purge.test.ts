// @module-tag cluster (a law test: npm run test:cluster runs it again on a local 3+3 cluster)
/**
 * Purge by tag and by table, hard and soft, fleet-wide and race-safe; and the
 * namespace and source fingerprint that keep deployments on one Valkey apart.
 * Every store here has its own connections (as separate instances would), and
 * every source read is counted in the loader, the source of these tables.
 */
import { describe, expect, it, vi } from 'vitest';
import { epochsKey, keyPrefix, type LoadFn, type ReadResult, withPolicy } from '../src/index.js';
import { clientLists, errorOf, metricValue, openStore, scopedValkey } from './helpers/probe.js';
import { deferred, uniqueTable } from './helpers/store.js';

/** A source whose row `id` carries the tag `cat:<id mod 3>`; it counts its reads per id. */
function taggedSource() {
  const reads = new Map<string, number>();
  let failing = false;
  const load: LoadFn = async (id) => {
    if (failing) throw new Error('the source is down');
    const n = (reads.get(id) ?? 0) + 1;
    reads.set(id, n);
    return withPolicy({ id, n }, { tags: [`cat:${Number(id) % 3}`, 'all-rows'] });
  };
  return {
    load,
    readsOf: (id: string) => reads.get(id) ?? 0,
    total: () => [...reads.values()].reduce((a, b) => a + b, 0),
    fail(on: boolean) {
      failing = on;
    },
  };
}

const IDS = Array.from({ length: 9 }, (_, i) => String(i));
const inCat1 = IDS.filter((id) => Number(id) % 3 === 1);

/** The value of a found read. */
const rowOf = (r: ReadResult) => (r.found ? (r.value as { id: string; n: number }) : undefined);

describe('hard purge', () => {
  it('a hard purge by tag: its rows are loaded again, once per row for the fleet, and no other row is', async () => {
    const table = uniqueTable('purge-hard');
    const source = taggedSource();
    const a = await openStore({ [table]: { load: source.load } });
    const b = await openStore({ [table]: { load: source.load } });
    for (const id of IDS) {
      await a.table(table).get(id);
      await b.table(table).get(id);
    }
    expect(source.total()).toBe(IDS.length);
    await a.table(table).purge({ tags: ['cat:1'] });
    // This instance: never serves a purged row once the purge answered.
    for (const id of inCat1) expect(rowOf(await a.table(table).get(id))?.n).toBe(2);
    // The other: within the coherence bound (its event), and without a second source read.
    await vi.waitFor(async () => {
      for (const id of inCat1) expect(rowOf(await b.table(table).get(id))?.n).toBe(2);
    });
    for (const id of IDS) {
      expect(source.readsOf(id), id).toBe(inCat1.includes(id) ? 2 : 1);
      expect(rowOf(await b.table(table).get(id))?.n).toBe(inCat1.includes(id) ? 2 : 1);
    }
    expect(await metricValue(a, 'echostore_purges_total', table, { kind: 'hard_tags' })).toBe(1);
    expect(await metricValue(a, 'echostore_purged_rows_total', table, { kind: 'hard' })).toBe(3);
  });

  it('a table purge (all: true) reaches every row, untagged ones included', async () => {
    const table = uniqueTable('purge-all');
    let reads = 0;
    const a = await openStore({ [table]: { load: (id) => ({ id, n: ++reads }) } });
    for (const id of ['x', 'y']) await a.table(table).get(id);
    const { epoch } = await a.table(table).purge({ all: true });
    expect(Number.isSafeInteger(epoch)).toBe(true);
    for (const id of ['x', 'y']) expect((await a.table(table).get(id)).layer).toBe('origin');
    expect(reads).toBe(4);
    expect(await metricValue(a, 'echostore_purges_total', table, { kind: 'hard_table' })).toBe(1);
  });
});

describe('soft purge', () => {
  it('serves purged rows stale while one refresh per row per fleet runs', async () => {
    const table = uniqueTable('purge-soft');
    const source = taggedSource();
    const a = await openStore({ [table]: { load: source.load } });
    const b = await openStore({ [table]: { load: source.load } });
    for (const id of inCat1) {
      await a.table(table).get(id);
      await b.table(table).get(id);
    }
    await a.table(table).purge({ tags: ['cat:1'], soft: true });
    for (const id of inCat1) {
      const r = await a.table(table).get(id);
      // The old value, said stale, answered at once (no wait for the source).
      expect(r.stale).toBe(true);
      expect(rowOf(r)?.n).toBe(1);
    }
    // Both instances keep reading; each row is refreshed once for the fleet.
    await vi.waitFor(async () => {
      for (const id of inCat1) {
        for (const s of [a, b]) expect(rowOf(await s.table(table).get(id))?.n).toBe(2);
      }
    });
    for (const id of inCat1) expect(source.readsOf(id)).toBe(2);
    expect(await metricValue(a, 'echostore_purges_total', table, { kind: 'soft_tags' })).toBe(1);
  });

  it('stale-if-error keeps soft-purged rows when their refresh fails', async () => {
    const table = uniqueTable('purge-soft-error');
    const source = taggedSource();
    const a = await openStore({ [table]: { load: source.load } });
    await a.table(table).get('1');
    source.fail(true);
    await a.table(table).purge({ tags: ['cat:1'], soft: true });
    const first = await a.table(table).get('1');
    expect(first.stale).toBe(true);
    await vi.waitFor(() => expect(a.table(table).stats().flights).toBe(0));
    const again = await a.table(table).get('1');
    expect(rowOf(again)?.n).toBe(1);
    expect(again.stale).toBe(true);
  });
});

/** A load tagged `t` whose first call waits for `release`; `reads()` counts its calls. */
function heldFirstLoad() {
  const release = deferred<void>();
  let reads = 0;
  const load: LoadFn = async (id) => {
    const n = ++reads;
    if (n === 1) await release.promise;
    return withPolicy({ id, n }, { tags: ['t'] });
  };
  return { release, load, reads: () => reads };
}

describe('race-safe purge', () => {
  it('a load that started before a purge never stores its value as current after it (L2)', async () => {
    const table = uniqueTable('purge-race-l2');
    const { release, load, reads } = heldFirstLoad();
    const a = await openStore({ [table]: { load } });
    const b = await openStore({ [table]: { load } });
    const before = a.table(table).get('r');
    await vi.waitFor(() => expect(reads()).toBe(1));
    await a.table(table).purge({ tags: ['t'] });
    release.resolve();
    // The caller that asked before the purge may get what the load read then.
    expect(rowOf(await before)?.n).toBe(1);
    // Its fill reached L2 after the purge, but it was read before: every instance loads anew
    // (b once it holds the purge's epoch: its event).
    expect(rowOf(await a.table(table).get('r'))?.n).toBe(2);
    await vi.waitFor(async () => expect(rowOf(await b.table(table).get('r'))?.n).toBe(2));
    expect(reads()).toBe(2);
  });

  it('a caller that joins, after the purge answered, a load that started before it gets a load after it', async () => {
    const table = uniqueTable('purge-race-join');
    const { release, load, reads } = heldFirstLoad();
    const a = await openStore({ [table]: { load } });
    const before = a.table(table).get('j');
    await vi.waitFor(() => expect(reads()).toBe(1));
    await a.table(table).purge({ tags: ['t'] });
    const after = a.table(table).get('j');
    release.resolve();
    expect(rowOf(await before)?.n).toBe(1);
    expect(rowOf(await after)?.n).toBe(2);
  });
});

describe('fleet-wide purge', () => {
  it('an instance that missed the purge event reads the epochs again after its subscriber reconnects', async () => {
    const table = uniqueTable('purge-missed');
    const source = taggedSource();
    const raw = scopedValkey();
    const b = await openStore({ [table]: { load: source.load } });
    // The purger publishes nothing (coherence off): b never hears of the purge.
    const quiet = await openStore({ [table]: { load: source.load } }, { coherence: false });
    await b.table(table).get('1');
    await quiet.table(table).purge({ tags: ['cat:1'] });
    const name = b.valkeyHealth().subscriberName as string;
    const subscriber = (await clientLists(raw))
      .flatMap(({ server, list }) => list.split('\n').map((line) => ({ server, line })))
      .find(({ line }) => line.includes(` name=${name} `));
    const id = /id=(\d+)/.exec(subscriber?.line as string)?.[1];
    await subscriber?.server.client('KILL', 'ID', id as string);
    await vi.waitFor(
      async () => expect(await metricValue(b, 'echostore_l1_flushes_total', table)).toBe(1),
      { timeout: 5_000 },
    );
    // L2 still holds the row read before the purge: b must judge it by the stored epochs.
    expect(rowOf(await b.table(table).get('1'))?.n).toBe(2);
    expect(source.readsOf('1')).toBe(2);
  });

  it('a store that starts after a purge never serves a row it covers', async () => {
    const table = uniqueTable('purge-start');
    const source = taggedSource();
    const a = await openStore({ [table]: { load: source.load } });
    await a.table(table).get('4');
    await a.table(table).purge({ tags: ['cat:1'] });
    const late = await openStore({ [table]: { load: source.load } });
    expect(rowOf(await late.table(table).get('4'))?.n).toBe(2);
  });
});

describe('purge input', () => {
  it.each([
    ['neither tags nor all', {}],
    ['both tags and all', { tags: ['a'], all: true }],
    ['no tag', { tags: [] }],
    ['too many tags', { tags: Array.from({ length: 257 }, (_, i) => `t${i}`) }],
    ['a tag with a space', { tags: ['a b'] }],
    ['a tag with "|"', { tags: ['a|b'] }],
    ['a tag over 128 bytes', { tags: ['x'.repeat(129)] }],
    ['a tag that is not a string', { tags: [5] }],
    ['all: false', { all: false }],
    ['soft that is not a boolean', { all: true, soft: 'yes' }],
  ])('%s is ECC_BAD_PURGE', async (_why, input) => {
    const table = uniqueTable('purge-bad');
    const a = await openStore({ [table]: { load: () => 1 } });
    // biome-ignore lint/suspicious/noExplicitAny: bad input on purpose
    expect((await errorOf(a.table(table).purge(input as any))).code).toBe('ECC_BAD_PURGE');
  });

  it('a row whose source gives more than 64 tags fails its load with ECC_BAD_ROW_TAGS, and nothing is cached', async () => {
    const table = uniqueTable('row-tags');
    const tags = Array.from({ length: 65 }, (_, i) => `t${i}`);
    const a = await openStore({ [table]: { load: () => withPolicy({ x: 1 }, { tags }) } });
    expect((await errorOf(a.table(table).get('1'))).code).toBe('ECC_BAD_ROW_TAGS');
    expect(a.table(table).stats().l1_entries).toBe(0);
  });
});

describe('namespaces and fingerprints', () => {
  it('two deployments with a table of the same name in different namespaces each serve their own source', async () => {
    const table = uniqueTable('ns');
    const raw = scopedValkey();
    const mysql = await openStore(
      { [table]: { load: (id) => ({ id, from: 'mysql' }) } },
      {
        namespace: 'ns-one',
      },
    );
    const postgres = await openStore(
      { [table]: { load: (id) => ({ id, from: 'postgres' }) } },
      {
        namespace: 'ns-two',
      },
    );
    expect(
      (await mysql.table(table).get('1')).found && (await mysql.table(table).get('1')),
    ).toMatchObject({ value: { from: 'mysql' } });
    const r = await postgres.table(table).get('1');
    expect(r.layer).toBe('origin');
    expect(r.found && r.value).toEqual({ id: '1', from: 'postgres' });
    expect(await raw.exists(`${keyPrefix(table, 'ns-one')}:{1}`)).toBe(1);
    expect(await raw.exists(`${keyPrefix(table, 'ns-two')}:{1}`)).toBe(1);
    // A purge in one namespace leaves the other alone.
    await mysql.table(table).purge({ all: true });
    expect(await raw.exists(epochsKey(table, 'ns-one'))).toBe(1);
    expect(await raw.exists(epochsKey(table, 'ns-two'))).toBe(0);
  });

  it('a bad namespace is refused with ECC_BAD_CONFIG naming the field', async () => {
    const err = await errorOf(openStore({ t: { load: () => 1 } }, { namespace: 'Bad:NS' }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as { field?: string }).field).toBe('namespace');
  });

  it('a row another source wrote under the same table name is a miss, counted, never served', async () => {
    const table = uniqueTable('fingerprint');
    const mine = await openStore({
      [table]: { load: (id) => ({ id, from: 'mine' }), fingerprint: 'source-a' },
    });
    const theirs = await openStore({
      [table]: { load: (id) => ({ id, from: 'theirs' }), fingerprint: 'source-b' },
    });
    await mine.table(table).get('1');
    const r = await theirs.table(table).get('1');
    expect(r.layer).toBe('origin');
    expect(r.found && r.value).toEqual({ id: '1', from: 'theirs' });
    expect(await metricValue(theirs, 'echostore_foreign_rows_total', table)).toBeGreaterThan(0);
  });
});

describe('writes and purges', () => {
  it('a PUT after a purge is served: its row is as new as its write, of its own source', async () => {
    const table = uniqueTable('purge-put');
    let reads = 0;
    const load: LoadFn = (id) => ({ id, n: ++reads });
    const a = await openStore({ [table]: { load, fingerprint: 'mine' } });
    const b = await openStore({ [table]: { load, fingerprint: 'mine' } });
    await a.table(table).get('p');
    await a.table(table).purge({ all: true });
    await a.table(table).put('p', { put: true });
    expect(await a.table(table).get('p')).toMatchObject({ layer: 'l1', value: { put: true } });
    expect(await b.table(table).get('p')).toMatchObject({ layer: 'l2', value: { put: true } });
    expect(reads).toBe(1);
    // A later table purge reaches it like any row (on b once its event arrives).
    await a.table(table).purge({ all: true });
    await vi.waitFor(async () =>
      expect(
        (await b.table(table).get('p')).found && (await b.table(table).get('p')),
      ).toMatchObject({
        value: { id: 'p', n: 2 },
      }),
    );
    expect(reads).toBe(2);
  });
});

describe('deletes and fingerprints', () => {
  it("a DELETE's tombstone is of the table's own source: never counted as another source's row", async () => {
    const table = uniqueTable('purge-del');
    let reads = 0;
    const load: LoadFn = (id) => ({ id, n: ++reads });
    const a = await openStore({ [table]: { load, fingerprint: 'mine' } });
    const b = await openStore({ [table]: { load, fingerprint: 'mine' } });
    await a.table(table).get('d');
    await a.table(table).invalidate('d');
    expect(rowOf(await b.table(table).get('d'))?.n).toBe(2);
    expect(await metricValue(b, 'echostore_foreign_rows_total', table)).toBe(0);
  });
});
