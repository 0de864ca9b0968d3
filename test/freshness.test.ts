// @module-tag cluster (a law test: npm run test:cluster runs it again on a local 3+3 cluster)
/**
 * Freshness: soft and hard TTL, stale-while-revalidate, stale-if-error,
 * XFetch, per-row policy, invalidation races, coherent L1s, refresh
 * discipline. L1 runs on a clock the tests move (`createStore`'s `now`);
 * Valkey judges its copies on its own clock, so a value meant to be stale in
 * L2 is planted stale on Valkey's clock (`plantStale`) rather than waited
 * for. "Eventually" is `vi.waitFor`; a fixed sleep only shows that something
 * has *not* happened, or lets Valkey's own clock pass where a test needs it.
 */
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { type Store, withPolicy } from '../src/index.js';
import { eventsChannel, leaseKey, valueKey } from '../src/l2/keys.js';
import { manualClock } from './helpers/clock.js';
import {
  clientLists,
  landed,
  metricValue,
  openStore,
  plantStale,
  readEnvelope,
  scopedValkey,
  untilValkeyTime,
} from './helpers/probe.js';
import { spawnServer } from './helpers/server.js';
import { deferred, delay, uniqueTable } from './helpers/store.js';

/** A loader that counts calls and answers `{ n }` (n = call number); calls after the first wait for `hold`, if given. */
function counting(hold?: Promise<void>) {
  let calls = 0;
  return {
    load: async () => {
      const n = ++calls;
      if (n > 1 && hold !== undefined) await hold;
      return { n };
    },
    calls: () => calls,
  };
}

const policy = {
  ttlMs: 10_000,
  staleMs: 60_000,
  jitter: 0,
  earlyRefreshBeta: 0,
  l1: { ttlMs: 60_000 },
};

/** Past the soft TTL of a row minted now, within its hard TTL. */
const STALE_MS = 10_001;

/** Waits until no flight of `table` runs in any of `stores`. */
async function idle(table: string, ...stores: Store[]): Promise<void> {
  await vi.waitFor(() => {
    for (const s of stores) expect(s.table(table).stats().flights).toBe(0);
  });
}

describe('soft and hard TTL (stale-while-revalidate)', () => {
  it('after ttlMs a read answers the stale value at once and one background refresh replaces it', async () => {
    const table = uniqueTable('swr');
    const clock = manualClock();
    const refresh = deferred<void>();
    const source = counting(refresh.promise);
    const store = await openStore(
      { [table]: { ...policy, load: source.load } },
      { now: clock.now },
    );
    const t = store.table(table);
    await t.get('k');
    clock.advance(STALE_MS);
    const reads = await Promise.all(Array.from({ length: 100 }, () => t.get('k')));
    expect(reads.every((r) => r.found && r.stale && (r.value as { n: number }).n === 1)).toBe(true);
    expect(reads.every((r) => r.ttlMs < 0)).toBe(true);
    // The one refresh is running (held in the loader) while all 100 were answered.
    await vi.waitFor(() => expect(source.calls()).toBe(2));
    refresh.resolve();
    await idle(table, store);
    const fresh = await t.get('k');
    expect(fresh.found && fresh.value).toEqual({ n: 2 });
    expect(fresh.stale).toBe(false);
    expect(fresh.layer).toBe('l1');
    expect(source.calls()).toBe(2);
    expect(await metricValue(store, 'echostore_refreshes_total', table, { reason: 'stale' })).toBe(
      1,
    );
    expect(await metricValue(store, 'echostore_reads_total', table, { layer: 'stale' })).toBe(100);
  });

  it('a stale value in L2 is served at once to a cold instance, which refreshes it once for the fleet', async () => {
    const table = uniqueTable('swr-l2');
    const raw = scopedValkey();
    const refresh = deferred<void>();
    const source = counting(refresh.promise);
    const open = () => openStore({ [table]: { ...policy, load: source.load } });
    // Another instance's value, stale on Valkey's clock (the clock Valkey judges by).
    await plantStale(raw, table, 'k', { n: 1 });
    const b = await open();
    const c = await open();
    const reads = await Promise.all(
      [b, c].flatMap((s) => Array.from({ length: 50 }, () => s.table(table).get('k'))),
    );
    expect(reads.every((r) => r.found && r.stale && (r.value as { n: number }).n === 1)).toBe(true);
    refresh.resolve();
    await vi.waitFor(() => expect(source.calls()).toBe(1));
    await idle(table, b, c);
    expect(source.calls()).toBe(1);
  });

  it("past ttlMs + staleMs on this process's clock, L1 no longer answers the row: the next read asks Valkey", async () => {
    const table = uniqueTable('hard');
    const clock = manualClock();
    const source = counting();
    const store = await openStore(
      { [table]: { ...policy, staleMs: 5_000, load: source.load } },
      { now: clock.now },
    );
    const t = store.table(table);
    await t.get('k');
    clock.advance(15_001);
    // L1 (lru-cache, real time) still holds the row: only the store's own hard-TTL
    // check keeps L1 from answering it. Valkey judges its copy on its own clock, on
    // which the value is still fresh, so Valkey answers.
    expect(t.stats().l1_entries).toBe(1);
    const r = await t.get('k');
    expect(r.layer).toBe('l2');
    expect(source.calls()).toBe(1);
  });

  it('Valkey drops the key at the hard TTL (PX)', async () => {
    // Real time on purpose: the expiry is Valkey's own (PX), which no injected clock moves.
    // Kept short: 40 ms soft + 40 ms stale.
    const table = uniqueTable('hard-px');
    const raw = scopedValkey();
    const source = counting();
    const store = await openStore({
      [table]: { ...policy, ttlMs: 40, staleMs: 40, load: source.load },
    });
    await store.table(table).get('k');
    // Not waited for with `landed`: the key may already be gone again (80 ms hard TTL).
    expect(await raw.pttl(valueKey(table, 'k'))).toBeLessThanOrEqual(80);
    await vi.waitFor(async () => expect(await raw.exists(valueKey(table, 'k'))).toBe(0), {
      interval: 10,
    });
    const r = await store.table(table).get('k');
    expect(r.layer).toBe('origin');
    expect(source.calls()).toBe(2);
  });

  it('an explicit invalidation is a hard delete: the old value is never served as stale', async () => {
    const table = uniqueTable('hard-delete');
    const clock = manualClock();
    const source = counting();
    const store = await openStore(
      { [table]: { ...policy, load: source.load } },
      { now: clock.now },
    );
    const t = store.table(table);
    await t.get('k');
    clock.advance(STALE_MS);
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
    expect(await metricValue(store, 'echostore_loads_total', table)).toBe(1);
  });
});

describe('stale-if-error', () => {
  it('when refreshes fail, stale keeps being served with a retry back-off, and the value is never deleted', async () => {
    const table = uniqueTable('sie');
    const raw = scopedValkey();
    const clock = manualClock();
    let calls = 0;
    let failing = false;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    onTestFinished(() => {
      process.off('unhandledRejection', onUnhandled);
    });
    const store = await openStore(
      {
        [table]: {
          ...policy,
          // The back-off alone (errorTtlMs: 0): a remembered failure lives on Valkey's real clock, not on this test's.
          errorTtlMs: 0,
          load: async () => {
            calls++;
            if (failing) throw new Error('source down');
            return { ok: calls };
          },
        },
      },
      { now: clock.now },
    );
    const t = store.table(table);
    const failures = () => metricValue(store, 'echostore_refresh_failures_total', table);
    await t.get('k');
    failing = true;
    clock.advance(STALE_MS);
    expect(await t.get('k')).toMatchObject({ stale: true, value: { ok: 1 } });
    await vi.waitFor(async () => expect(await failures()).toBe(1));
    await idle(table, store);
    // 990 ms of stale reads: the failed refresh backs off 1 s, so none is tried again.
    for (let i = 0; i < 99; i++) {
      clock.advance(10);
      const r = await t.get('k');
      expect(r.found && r.stale && r.value).toEqual({ ok: 1 });
    }
    expect(calls).toBe(2);
    expect(t.stats().flights).toBe(0);
    // Past the back-off the next stale read tries again (and fails again: 2 s next time).
    clock.advance(10);
    expect(await t.get('k')).toMatchObject({ stale: true, value: { ok: 1 } });
    await vi.waitFor(async () => expect(await failures()).toBe(2));
    expect(calls).toBe(3);
    expect(await raw.exists(valueKey(table, 'k'))).toBe(1);
    // Fixed sleep, to show something has NOT happened: no failed refresh left an unhandled rejection.
    await delay(20);
    expect(unhandled).toEqual([]);
  });

  it('a failed foreground load answers the stale L2 value instead of the error', async () => {
    const table = uniqueTable('sie-l2');
    await plantStale(scopedValkey(), table, 'k', { v: 'old' });
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
  it.each([
    [50, 'refreshes a hot key before it goes stale'],
    [0, 'never refreshes early'],
  ])('with beta %s it %s', async (beta) => {
    const table = uniqueTable(`xfetch-${beta}`);
    const clock = manualClock();
    let calls = 0;
    const store = await openStore(
      {
        [table]: {
          ...policy,
          earlyRefreshBeta: beta,
          load: async () => {
            calls++;
            // A load that takes real time: XFetch's delta (a 0 ms load never refreshes early).
            await delay(5);
            return { n: calls };
          },
        },
      },
      { now: clock.now },
    );
    const t = store.table(table);
    const first = await t.get('hot');
    // 1 ms before the soft expiry: with beta 50 and a ≥ 4 ms load each read is due
    // unless random() > e^(−1/200) ≈ 0.995; 20 reads all missing is < 1e-45.
    clock.advance(first.ttlMs - 1);
    const reads = await Promise.all(Array.from({ length: 20 }, () => t.get('hot')));
    expect(reads.some((r) => r.stale)).toBe(false);
    if (beta > 0) {
      await vi.waitFor(async () =>
        expect(
          await metricValue(store, 'echostore_refreshes_total', table, { reason: 'early' }),
        ).toBe(1),
      );
      await idle(table, store);
      expect(calls).toBe(2);
      const after = await t.get('hot');
      expect(after.found && after.value).toEqual({ n: 2 });
      expect(after.stale).toBe(false);
    } else {
      // A refresh is asked for in the caller and counted by the owner one microtask later.
      await new Promise((r) => setImmediate(r));
      expect(
        await metricValue(store, 'echostore_refreshes_total', table, { reason: 'early' }),
      ).toBe(0);
      expect(t.stats().flights).toBe(0);
      expect(calls).toBe(1);
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
    await landed(raw, `ecc:${table}:{short}`);
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
    const started = deferred<void>();
    let version = 'old';
    const load = async () => {
      const v = version;
      if (v === 'old') {
        started.resolve();
        await gate.promise;
      }
      return { v };
    };
    const clock = manualClock();
    const a = await openStore({ [table]: { load } }, { now: clock.now });
    const b = await openStore({ [table]: { load } }, { now: clock.now });
    const early = a.table(table).get('k');
    await started.promise;
    // Versions are per-instance milliseconds × 1000: a DELETE is ordered after a
    // flight that started in an earlier millisecond, not one in the same.
    clock.advance(1);
    version = 'new';
    await b.table(table).invalidate('k');
    // A learns of the DELETE (its event) and detaches its flight.
    await idle(table, a);
    // A caller arriving now starts a new flight, it does not get "old".
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
    await vi.waitFor(() => expect(b.table(table).stats().l1_entries).toBe(0));
    const r = await b.table(table).get('k');
    expect(r.found && r.value).toEqual({ v: 'put' });
    expect(await metricValue(b, 'echostore_coherence_total', table, { result: 'applied' })).toBe(1);
  });

  it('duplicate and reordered messages are harmless (newer-wins)', async () => {
    const table = uniqueTable('coh-order');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: () => ({ v: 1 }) } });
    const t = store.table(table);
    const coherence = (result: string) =>
      metricValue(store, 'echostore_coherence_total', table, { result });
    const row = await t.get('k');
    // A second row, whose old-version events mark how far the subscriber has read:
    // events arrive in publish order, so once a marker is counted, all before it are too.
    const marker = await t.get('marker');
    // This instance's own fill echoes are counted as "stale" (not newer than its rows).
    let stale = 2;
    await vi.waitFor(async () => expect(await coherence('stale')).toBe(stale));
    const channel = eventsChannel(table);
    const send = (id: string, v: number) =>
      raw.publish(channel, JSON.stringify({ k: 'put', id, v }));
    /** Sends a marker and waits until it is counted, with `staleBefore` stale events ahead of it. */
    const handled = async (staleBefore: number) => {
      await send('marker', marker.version - 1);
      stale += staleBefore + 1;
      await vi.waitFor(async () => expect(await coherence('stale')).toBe(stale));
    };
    await send('k', row.version - 10);
    await send('k', row.version);
    await handled(2);
    expect(t.stats().l1_entries).toBe(2);
    await send('k', row.version + 10);
    await send('k', row.version + 10);
    await send('k', row.version + 5);
    await handled(0);
    expect(t.stats().l1_entries).toBe(1);
    expect(await coherence('applied')).toBe(1);
    await send('k', Number.NaN);
    await raw.publish(channel, 'not json');
    await handled(0);
    expect(await coherence('applied')).toBe(1);
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
    // This store's own subscriber, by its name (other test files share the server; on a
    // cluster it may be on any node).
    const name = store.valkeyHealth().subscriberName as string;
    expect(name).toMatch(/^echostore-events-/);
    const subscriber = (await clientLists(raw))
      .flatMap(({ server, list }) => list.split('\n').map((line) => ({ server, line })))
      .find(({ line }) => line.includes(` name=${name} `));
    expect(subscriber).toBeDefined();
    const id = /id=(\d+)/.exec(subscriber?.line as string)?.[1];
    await subscriber?.server.client('KILL', 'ID', id as string);
    await vi.waitFor(() => expect(t.stats().l1_entries).toBe(0), { timeout: 5_000 });
    expect(await metricValue(store, 'echostore_l1_flushes_total', table)).toBe(1);
  });
});

describe('refresh discipline', () => {
  it('a caller that joins a background refresh is answered by it, even when another instance holds the lease', async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const raw = scopedValkey(server.url);
    const table = uniqueTable('join-refresh');
    const source = counting();
    // Real time on purpose: the value must be past its hard TTL on Valkey's clock too
    // (its PX gone), which no injected clock moves. Kept short: 100 ms soft + 200 ms stale.
    const store = await openStore(
      {
        [table]: {
          ...policy,
          ttlMs: 100,
          staleMs: 200,
          waitTimeoutMs: 10_000,
          l1: { ttlMs: 60_000 },
          load: source.load,
        },
      },
      // A command timeout far above the pause below: the refresh must wait for Valkey, not go degraded.
      { valkey: { url: server.url, commandTimeoutMs: 5_000 } },
    );
    const t = store.table(table);
    await t.get('k');
    // Until the row is past its soft TTL on Valkey's clock (and so on the store's, read from it).
    const stored = await readEnvelope(raw, table, 'k');
    if (stored === null || stored === 'garbage') throw new Error('k is not in Valkey');
    await untilValkeyTime(raw, stored.softExpiresAt + 10);
    // Another instance is refreshing, and holds the lease.
    await raw.set(leaseKey(table, 'k'), 'someone-else', 'PX', 20_000);
    const pid = server.process?.pid as number;
    process.kill(pid, 'SIGSTOP');
    let resumed = false;
    onTestFinished(() => {
      if (!resumed) process.kill(pid, 'SIGCONT');
    });
    // Stale: answered at once, and a background refresh is sent (held up by the pause).
    expect((await t.get('k')).stale).toBe(true);
    await vi.waitFor(() => expect(t.stats().flights).toBe(1));
    // Until the row is past its hard TTL: its L1 lifetime ends there (l1.ttlMs is far longer),
    // as Valkey's PX does on the same clock.
    await vi.waitFor(() => expect(t.l1TtlMs('k')).toBe(0));
    // Past the hard TTL: this caller misses L1 and joins the running refresh flight.
    const joined = t.get('k');
    await vi.waitFor(() => expect(t.stats().coalesced).toBe(1));
    process.kill(pid, 'SIGCONT');
    resumed = true;
    // The refresh now waits for the other instance like any flight with a caller.
    await vi.waitFor(async () =>
      expect(
        await metricValue(store, 'echostore_lease_total', table, { outcome: 'contended' }),
      ).toBe(1),
    );
    // That instance's load fails: it releases its lease and wakes the waiters.
    await raw.del(leaseKey(table, 'k'));
    await raw.publish(eventsChannel(table), JSON.stringify({ k: 'release', id: 'k' }));
    const r = await joined;
    expect(r.found && r.value).toEqual({ n: 2 });
    expect(source.calls()).toBe(2);
  });

  it('an instance whose refresh finds another instance refreshing does not retry until that lease ends', async () => {
    const table = uniqueTable('pause');
    const clock = manualClock();
    const gate = deferred<void>();
    let aCalls = 0;
    const a = await openStore(
      {
        [table]: {
          ...policy,
          load: async () => {
            aCalls++;
            if (aCalls > 1) await gate.promise;
            return { n: aCalls };
          },
        },
      },
      { now: clock.now },
    );
    const b = await openStore(
      { [table]: { ...policy, load: () => ({ n: 'b' }) } },
      { now: clock.now },
    );
    const refreshes = () => metricValue(b, 'echostore_refreshes_total', table, { reason: 'stale' });
    await a.table(table).get('k');
    await b.table(table).get('k');
    clock.advance(STALE_MS);
    await a.table(table).get('k'); // stale: A's refresh takes the lease and blocks in the loader
    await vi.waitFor(() => expect(aCalls).toBe(2));
    // B's refresh finds A's lease and gives up (skipped) …
    expect((await b.table(table).get('k')).stale).toBe(true);
    await vi.waitFor(async () => expect(await refreshes()).toBe(1));
    await idle(table, b);
    // … and does not ask again while A's lease runs.
    for (let i = 0; i < 30; i++) {
      clock.advance(5);
      expect((await b.table(table).get('k')).stale).toBe(true);
    }
    await new Promise((r) => setImmediate(r));
    expect(await refreshes()).toBe(1);
    expect(b.table(table).stats().flights).toBe(0);
    gate.resolve();
    // A's fill reaches B as an event newer than B's row: B drops it and reads A's value.
    await vi.waitFor(() => expect(b.table(table).stats().l1_entries).toBe(0));
    const r = await b.table(table).get('k');
    expect(r.found && r.value).toEqual({ n: 2 });
  });

  it('never answers from L1 a row past its hard TTL, even when L1 has not evicted it yet', async () => {
    const table = uniqueTable('hard-check');
    const clock = manualClock();
    const source = counting();
    const store = await openStore(
      { [table]: { ...policy, staleMs: 0, load: source.load } },
      { now: clock.now },
    );
    const t = store.table(table);
    await t.get('k');
    clock.advance(10_000);
    expect(t.stats().l1_entries).toBe(1);
    const r = await t.get('k');
    // Not L1: Valkey answered, judging its copy on its own clock (still fresh there).
    expect(r.layer).toBe('l2');
    expect(source.calls()).toBe(1);
  });
});
