import { describe, expect, it, onTestFinished } from 'vitest';
import { withPolicy } from '../src/index.js';
import { clientLists, errorOf, metricValue, openStore, scopedValkey } from './helpers/probe.js';
import { spawnServer } from './helpers/server.js';
import { deferred, delay, uniqueTable } from './helpers/store.js';

/** A loader that counts calls and answers `{ n }` (n = call number). */
function counting(delayMs = 0) {
  let calls = 0;
  return {
    load: async () => {
      const n = ++calls;
      if (delayMs > 0) await delay(delayMs);
      return { n };
    },
    calls: () => calls,
  };
}

const policy = {
  ttlMs: 200,
  staleMs: 5_000,
  jitter: 0,
  earlyRefreshBeta: 0,
  l1: { ttlMs: 60_000 },
};

describe('soft and hard TTL (stale-while-revalidate)', () => {
  it('after ttlMs a read answers the stale value at once and one background refresh replaces it', async () => {
    const table = uniqueTable('swr');
    const source = counting(50);
    const store = await openStore({ [table]: { ...policy, load: source.load } });
    const t = store.table(table);
    await t.get('k');
    await delay(250);
    const reads = await Promise.all(Array.from({ length: 100 }, () => t.get('k')));
    expect(reads.every((r) => r.found && r.stale && (r.value as { n: number }).n === 1)).toBe(true);
    expect(reads.every((r) => r.ttlMs < 0)).toBe(true);
    await delay(150);
    expect(source.calls()).toBe(2);
    const fresh = await t.get('k');
    expect(fresh.found && fresh.value).toEqual({ n: 2 });
    expect(fresh.stale).toBe(false);
    expect(await metricValue(store, 'echostore_refreshes_total', table, { reason: 'stale' })).toBe(
      1,
    );
    expect(await metricValue(store, 'echostore_reads_total', table, { layer: 'stale' })).toBe(100);
  });

  it('a stale value in L2 is served at once to a cold instance, which refreshes it once for the fleet', async () => {
    const table = uniqueTable('swr-l2');
    const source = counting(50);
    const a = await openStore({ [table]: { ...policy, load: source.load } });
    await a.table(table).get('k');
    await delay(250);
    const b = await openStore({ [table]: { ...policy, load: source.load } });
    const c = await openStore({ [table]: { ...policy, load: source.load } });
    const reads = await Promise.all(
      [b, c].flatMap((s) => Array.from({ length: 50 }, () => s.table(table).get('k'))),
    );
    expect(reads.every((r) => r.found && r.stale && (r.value as { n: number }).n === 1)).toBe(true);
    await delay(200);
    expect(source.calls()).toBe(2);
  });

  it('after ttlMs + staleMs the value is gone: the next read waits for the source', async () => {
    const table = uniqueTable('hard');
    const raw = scopedValkey();
    const source = counting();
    const store = await openStore({ [table]: { ...policy, staleMs: 100, load: source.load } });
    const t = store.table(table);
    await t.get('k');
    await delay(350);
    expect(await raw.exists(`ecc:${table}:{k}`)).toBe(0);
    const r = await t.get('k');
    expect(r.layer).toBe('origin');
    expect(r.stale).toBe(false);
    expect(source.calls()).toBe(2);
  });

  it('an explicit invalidation is a hard delete: the old value is never served as stale', async () => {
    const table = uniqueTable('hard-delete');
    const source = counting();
    const store = await openStore({ [table]: { ...policy, load: source.load } });
    const t = store.table(table);
    await t.get('k');
    await delay(250);
    await t.invalidate('k');
    const r = await t.get('k');
    expect(r.stale).toBe(false);
    expect(r.found && r.value).toEqual({ n: 2 });
    expect(await metricValue(store, 'echostore_invalidations_total', table)).toBe(1);
  });

  it('counts negative hits: "not found" answered from the cache', async () => {
    const table = uniqueTable('neg-hits');
    const store = await openStore({ [table]: { ...policy, load: () => undefined } });
    const t = store.table(table);
    for (let i = 0; i < 3; i++) expect((await t.get('nobody')).found).toBe(false);
    // Every not-found answer counts as `negative`, whichever layer gave it; the source was read once.
    expect(await metricValue(store, 'echostore_reads_total', table, { layer: 'negative' })).toBe(3);
    expect(await metricValue(store, 'echostore_fills_total', table)).toBe(1);
  });
});

describe('stale-if-error', () => {
  it('when refreshes fail, stale keeps being served with a retry back-off, and the value is never deleted', async () => {
    const table = uniqueTable('sie');
    const raw = scopedValkey();
    let calls = 0;
    let failing = false;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    onTestFinished(() => {
      process.off('unhandledRejection', onUnhandled);
    });
    const store = await openStore({
      [table]: {
        ...policy,
        load: async () => {
          calls++;
          if (failing) throw new Error('source down');
          return { ok: calls };
        },
      },
    });
    const t = store.table(table);
    await t.get('k');
    failing = true;
    await delay(250);
    for (let i = 0; i < 40; i++) {
      const r = await t.get('k');
      expect(r.found && r.stale && r.value).toEqual({ ok: 1 });
      await delay(10);
    }
    // 400 ms of stale reads: the first refresh fails, the next waits out a 1 s back-off.
    expect(calls).toBe(2);
    expect(await raw.exists(`ecc:${table}:{k}`)).toBe(1);
    expect(await metricValue(store, 'echostore_refresh_failures_total', table)).toBe(1);
    await delay(50);
    expect(unhandled).toEqual([]);
  });

  it('a failed foreground load answers the stale L2 value instead of the error', async () => {
    const table = uniqueTable('sie-l2');
    const good = await openStore({ [table]: { ...policy, load: () => ({ v: 'old' }) } });
    await good.table(table).get('k');
    await delay(250);
    const bad = await openStore({
      [table]: {
        ...policy,
        load: () => {
          throw new Error('down');
        },
      },
    });
    const r = await bad.table(table).get('k');
    expect(r.found && r.stale && r.value).toEqual({ v: 'old' });
  });
});

describe('XFetch early refresh', () => {
  it('with a large beta a hot key is refreshed before it goes stale; with beta 0 it is not', async () => {
    for (const beta of [50, 0]) {
      const table = uniqueTable(`xfetch-${beta}`);
      const source = counting(40);
      const store = await openStore({
        [table]: { ...policy, ttlMs: 400, earlyRefreshBeta: beta, load: source.load },
      });
      const t = store.table(table);
      await t.get('hot');
      let staleReads = 0;
      const until = Date.now() + 350;
      while (Date.now() < until) {
        if ((await t.get('hot')).stale) staleReads++;
        await delay(5);
      }
      const early = await metricValue(store, 'echostore_refreshes_total', table, {
        reason: 'early',
      });
      if (beta > 0) {
        expect(early).toBeGreaterThanOrEqual(1);
        expect(source.calls()).toBeGreaterThanOrEqual(2);
      } else {
        expect(early).toBe(0);
        expect(source.calls()).toBe(1);
      }
      expect(staleReads).toBe(0);
    }
  });
});

describe('per-result policy', () => {
  it('a loader may set ttlMs, staleMs and negative for one row with withPolicy', async () => {
    const table = uniqueTable('row-policy');
    const raw = scopedValkey();
    const store = await openStore({
      [table]: {
        ttlMs: 60_000,
        staleMs: 60_000,
        jitter: 0,
        load: (id) => {
          if (id === 'short') return withPolicy({ id }, { ttlMs: 1_000, staleMs: 500 });
          if (id === 'gone') return withPolicy({ ignored: true }, { negative: true, ttlMs: 2_000 });
          return { id };
        },
      },
    });
    const t = store.table(table);
    await t.get('short');
    const pttl = await raw.pttl(`ecc:${table}:{short}`);
    expect(pttl).toBeGreaterThan(1_000);
    expect(pttl).toBeLessThanOrEqual(1_500);
    const gone = await t.get('gone');
    expect(gone.found).toBe(false);
    expect(await raw.pttl(`ecc:${table}:{gone}`)).toBeLessThanOrEqual(2_000);
    expect(() => withPolicy(1, { ttlMs: -1 })).toThrow(TypeError);
  });
});

describe('invalidation that wins races', () => {
  it('a DELETE while a load is blocked: the old value is never answered again, here or on another instance', async () => {
    const table = uniqueTable('del-race');
    const gate = deferred<void>();
    let version = 'old';
    const load = async () => {
      const v = version;
      if (v === 'old') await gate.promise;
      return { v };
    };
    const a = await openStore({ [table]: { load } });
    const b = await openStore({ [table]: { load } });
    const early = a.table(table).get('k');
    await delay(50);
    version = 'new';
    await b.table(table).invalidate('k');
    await delay(50);
    // A learnt of the DELETE: a caller arriving now starts a new flight, it does not get "old".
    const afterOnA = a.table(table).get('k');
    gate.resolve();
    expect(((await early) as { value: unknown }).value).toEqual({ v: 'old' });
    expect(((await afterOnA) as { value: unknown }).value).toEqual({ v: 'new' });
    for (const s of [a, b]) {
      const r = await s.table(table).get('k');
      expect(r.found && r.value).toEqual({ v: 'new' });
    }
  });
});

describe('coherent L1s', () => {
  it("a PUT on one instance drops the other instance's older L1 row", async () => {
    const table = uniqueTable('coh-put');
    const a = await openStore({ [table]: { load: () => ({ v: 'source' }) } });
    const b = await openStore({ [table]: { load: () => ({ v: 'source' }) } });
    await a.table(table).get('k');
    await b.table(table).get('k');
    await a.table(table).put('k', { v: 'put' });
    await delay(50);
    const r = await b.table(table).get('k');
    expect(r.found && r.value).toEqual({ v: 'put' });
    expect(await metricValue(b, 'echostore_coherence_total', table, { result: 'applied' })).toBe(1);
  });

  it('duplicate and reordered messages are harmless (newer-wins)', async () => {
    const table = uniqueTable('coh-order');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: () => ({ v: 1 }) } });
    const t = store.table(table);
    const row = await t.get('k');
    const channel = `ecc:events:${table}`;
    const send = (v: number) => raw.publish(channel, JSON.stringify({ k: 'put', id: 'k', v }));
    await delay(50);
    // This instance's own fill echo is already counted as "stale" (not newer than its row).
    const echoes = await metricValue(store, 'echostore_coherence_total', table, {
      result: 'stale',
    });
    await send(row.version - 10);
    await send(row.version);
    await delay(50);
    expect(t.stats().l1_entries).toBe(1);
    expect(await metricValue(store, 'echostore_coherence_total', table, { result: 'stale' })).toBe(
      echoes + 2,
    );
    await send(row.version + 10);
    await send(row.version + 10);
    await send(row.version + 5);
    await delay(50);
    expect(t.stats().l1_entries).toBe(0);
    expect(
      await metricValue(store, 'echostore_coherence_total', table, { result: 'applied' }),
    ).toBe(1);
    await send(Number.NaN);
    await raw.publish(channel, 'not json');
    await delay(20);
    expect((await t.get('k')).found).toBe(true);
  });

  it('flushes L1 once when the subscriber connection drops and reconnects', async () => {
    const table = uniqueTable('coh-flush');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: (id) => ({ id }) } });
    const t = store.table(table);
    await t.get('a');
    await t.get('b');
    expect(t.stats().l1_entries).toBe(2);
    const subscribers = (await clientLists(raw)).flatMap(({ server, list }) =>
      list
        .split('\n')
        .filter(
          (line) =>
            line.includes(`ecc:events:${table}`) ||
            (line.includes('sub=1') && line.includes('cmd=subscribe')),
        )
        .map((line) => ({ server, line })),
    );
    const subscriber = subscribers[0];
    expect(subscriber).toBeDefined();
    const id = /id=(\d+)/.exec(subscriber?.line as string)?.[1];
    await subscriber?.server.client('KILL', 'ID', id as string);
    const deadline = Date.now() + 5_000;
    while (t.stats().l1_entries > 0 && Date.now() < deadline) await delay(50);
    expect(t.stats().l1_entries).toBe(0);
    expect(await metricValue(store, 'echostore_l1_flushes_total', table)).toBe(1);
    expect((await errorOf(Promise.reject(Object.assign(new Error('x'), { code: 'X' })))).code).toBe(
      'X',
    );
  });
});

describe('refresh discipline', () => {
  it('a caller that joins a background refresh is answered by it, even when another instance holds the lease', async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const raw = scopedValkey(server.url);
    const table = uniqueTable('join-refresh');
    const source = counting();
    const store = await openStore(
      { [table]: { ...policy, staleMs: 300, waitTimeoutMs: 4_000, load: source.load } },
      { valkey: server.url },
    );
    const t = store.table(table);
    await t.get('k');
    await delay(300);
    // Another instance is refreshing: its lease ends in 1.5 s without a fill.
    await raw.set(`ecc:${table}:{k}:lease`, 'someone-else', 'PX', 1_500);
    const pid = server.process?.pid as number;
    process.kill(pid, 'SIGSTOP');
    let resumed = false;
    onTestFinished(() => {
      if (!resumed) process.kill(pid, 'SIGCONT');
    });
    // Stale: answered at once, and a background refresh is sent (held up by the pause).
    expect((await t.get('k')).stale).toBe(true);
    await delay(250);
    // Past the hard TTL: this caller misses L1 and joins the running refresh flight.
    const joined = t.get('k');
    await delay(20);
    process.kill(pid, 'SIGCONT');
    resumed = true;
    const r = await joined;
    expect(r.found && r.value).toEqual({ n: 2 });
    expect(source.calls()).toBe(2);
  });

  it('an instance whose refresh finds another instance refreshing does not retry until that lease ends', async () => {
    const table = uniqueTable('pause');
    const gate = deferred<void>();
    let aCalls = 0;
    const a = await openStore({
      [table]: {
        ...policy,
        load: async () => {
          aCalls++;
          if (aCalls > 1) await gate.promise;
          return { n: aCalls };
        },
      },
    });
    const b = await openStore({ [table]: { ...policy, load: () => ({ n: 'b' }) } });
    await a.table(table).get('k');
    await b.table(table).get('k');
    await delay(250);
    await a.table(table).get('k'); // stale: A's refresh takes the lease and blocks in the loader
    await delay(50);
    for (let i = 0; i < 30; i++) {
      expect((await b.table(table).get('k')).stale).toBe(true);
      await delay(5);
    }
    expect(await metricValue(b, 'echostore_refreshes_total', table, { reason: 'stale' })).toBe(1);
    gate.resolve();
    await delay(100);
    const r = await b.table(table).get('k');
    expect(r.found && r.value).toEqual({ n: 2 });
  });

  it('never answers a row past its hard TTL, even when L1 has not evicted it yet', async () => {
    const table = uniqueTable('hard-check');
    const source = counting();
    const store = await openStore({ [table]: { ...policy, staleMs: 0, load: source.load } });
    const t = store.table(table);
    await t.get('k');
    await delay(210);
    const r = await t.get('k');
    expect(r.stale).toBe(false);
    expect(r.found && r.value).toEqual({ n: 2 });
  });
});
