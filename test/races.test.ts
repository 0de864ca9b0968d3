// @module-tag cluster (a law test: npm run test:cluster runs it again on a local 3+3 cluster)
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { valueKey } from '../src/l2/keys.js';
import {
  errorOf,
  heldProcessStore,
  isTombstone,
  openStore,
  plantEnvelope,
  plantStale,
  readEnvelope,
  scopedValkey,
  storedValue,
  valkeyNowMs,
  watchCommands,
} from './helpers/probe.js';
import { spawnServer } from './helpers/server.js';
import { countingLoader, deferred, uniqueTable } from './helpers/store.js';

describe('writes win races', () => {
  it('a PUT on one instance refuses the fill of a load in flight on another (fleet)', async () => {
    const table = uniqueTable('put-race');
    const raw = scopedValkey();
    const gate = deferred<void>();
    const started = deferred<void>();
    const a = await openStore({
      [table]: {
        load: async () => {
          started.resolve();
          await gate.promise;
          return { from: 'source' };
        },
      },
    });
    const b = await openStore({ [table]: { load: () => ({ from: 'b-source' }) } });
    const loading = a.table(table).get('k');
    await started.promise;
    await b.table(table).put('k', { from: 'put' });
    gate.resolve();
    const answer = await loading;
    expect(answer.found && answer.value).toEqual({ from: 'source' });
    expect(await storedValue(raw, table, 'k')).toEqual({
      from: 'put',
    });
    const next = await a.table(table).get('k');
    expect(next.found && next.value).toEqual({ from: 'put' });
  });

  it('a fill without the lease (coalescing: process) never overwrites a PUT made meanwhile', async () => {
    const table = uniqueTable('cas');
    const raw = scopedValkey();
    const { a, started, gate } = await heldProcessStore(table, { from: 'source' });
    const b = await openStore({ [table]: { coalescing: 'process', load: () => ({}) } });
    const loading = a.table(table).get('k');
    await started.promise;
    await b.table(table).put('k', { from: 'put' });
    gate.resolve();
    await loading;
    expect(await storedValue(raw, table, 'k')).toEqual({
      from: 'put',
    });
  });

  it('a fill without the lease is not sent after a DELETE superseded it, even once the tombstone is gone', async () => {
    const table = uniqueTable('cas-del');
    const raw = scopedValkey();
    const { a, started, gate } = await heldProcessStore(table, { from: 'read before the delete' });
    const loading = a.table(table).get('k');
    await started.promise;
    await a.table(table).invalidate('k');
    expect(isTombstone(await readEnvelope(raw, table, 'k'))).toBe(true);
    // The tombstone expires (leaseMs + 60 s) or is evicted before a long load ends: the key is
    // absent again, as it was when the flight read it, so its mark no longer refuses the fill.
    await raw.del(valueKey(table, 'k'));
    gate.resolve();
    const answer = await loading;
    expect(answer.found && answer.value).toEqual({ from: 'read before the delete' });
    // Give a fill sent without waiting its round trip: nothing may land.
    await raw.ping();
    await a.table(table).invalidate('other'); // one more owner turn and Valkey round trip
    expect(await readEnvelope(raw, table, 'k')).toBeNull();
  });

  it('an acknowledged PUT survives a Valkey pause: the degraded fill that lands late does not overwrite it', async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const table = uniqueTable('pause-put');
    const raw = scopedValkey(server.url);
    const writer = await openStore(
      { [table]: { load: () => ({ from: 'source' }) } },
      { valkey: server.url },
    );
    await writer.table(table).put('k', { from: 'put' });
    const reader = await openStore(
      { [table]: { loadTimeoutMs: 500, leaseMs: 1_000, load: () => ({ from: 'source' }) } },
      { valkey: { url: server.url, commandTimeoutMs: 200 } },
    );
    const commands = await watchCommands(server.url);
    const pid = server.process?.pid as number;
    process.kill(pid, 'SIGSTOP');
    let resumed = false;
    onTestFinished(() => {
      if (!resumed) process.kill(pid, 'SIGCONT');
    });
    const degraded = await reader.table(table).get('k');
    expect(degraded.found && degraded.value).toEqual({ from: 'source' });
    process.kill(pid, 'SIGCONT');
    resumed = true;
    // The degraded fill sent during the pause waited in its connection: the server runs it
    // now, and it must not overwrite the acknowledged PUT.
    await vi.waitFor(async () =>
      expect(await commands.carrying(JSON.stringify({ from: 'source' }))).toHaveLength(1),
    );
    expect(await storedValue(raw, table, 'k')).toEqual({
      from: 'put',
    });
  });

  it("an instance's own PUT wins in its L1 even over a row with a higher (foreign) version", async () => {
    const table = uniqueTable('own-wins');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: () => ({ from: 'source' }) } });
    const future = (Date.now() + 3 * 365 * 24 * 3600 * 1000) * 1000;
    await plantEnvelope(raw, table, 'k', { version: future, value: { old: true } });
    const before = await store.table(table).get('k');
    expect(before.found && before.value).toEqual({ old: true });
    await store.table(table).put('k', { new: true });
    const after = await store.table(table).get('k');
    expect(after.found && after.value).toEqual({ new: true });
    expect(after.layer).toBe('l1');
  });

  it("versions come from Valkey's clock (µs), whatever this host's clock says, and rise per key", async () => {
    const table = uniqueTable('valkey-clock');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: () => ({}) } });
    const [sec, us] = (await raw.time()) as [number, number];
    const before = Number(sec) * 1_000_000 + Number(us);
    const { version: v1 } = await store.table(table).put('k', 1);
    const { version: v2 } = await store.table(table).put('k', 2);
    expect(v1).toBeGreaterThanOrEqual(before);
    expect(v1).toBeLessThan(before + 60_000_000);
    expect(v2).toBeGreaterThan(v1);
  });
});

describe('a soft DELETE (invalidate with soft: true)', () => {
  it('keeps the value stale in Valkey and refuses the fill of a load in flight on another instance', async () => {
    const table = uniqueTable('soft-del-race');
    const raw = scopedValkey();
    const gate = deferred<void>();
    const started = deferred<void>();
    await plantStale(raw, table, 'k', { from: 'old' });
    const a = await openStore({
      [table]: {
        staleMs: 600_000,
        load: async () => {
          started.resolve();
          await gate.promise;
          return { from: 'before-the-change' };
        },
      },
    });
    const b = await openStore({ [table]: { load: () => ({ from: 'after-the-change' }) } });
    // A's read is answered stale at once; its refresh loads (and is held) meanwhile.
    const loading = a.table(table).get('k');
    await started.promise;
    await b.table(table).invalidate('k', { soft: true });
    gate.resolve();
    expect((await loading).stale).toBe(true);
    await vi.waitFor(() => expect(a.table(table).stats().flights).toBe(0));
    const kept = await readEnvelope(raw, table, 'k');
    expect(kept !== null && kept !== 'garbage' && kept.value).toEqual({ from: 'old' });
    expect(kept !== null && kept !== 'garbage' && kept.softExpiresAt).toBeLessThanOrEqual(
      await valkeyNowMs(raw),
    );
    const next = await b.table(table).get('k');
    expect({ value: next.found && next.value, stale: next.stale }).toEqual({
      value: { from: 'old' },
      stale: true,
    });
  });

  it('answers every instance stale, then the value of one refresh', async () => {
    const table = uniqueTable('soft-del');
    const source = countingLoader();
    const options = { [table]: { load: source.load, ttlMs: 600_000, staleMs: 600_000 } };
    const a = await openStore(options);
    const b = await openStore(options);
    expect(await a.table(table).get('k')).toMatchObject({ value: { n: 1 }, stale: false });
    expect(await b.table(table).get('k')).toMatchObject({ value: { n: 1 }, layer: 'l2' });
    await a.table(table).invalidate('k', { soft: true });
    // B drops its L1 row on the event, then finds the value stale in Valkey.
    await vi.waitFor(async () =>
      expect(await b.table(table).get('k')).toMatchObject({ value: { n: 1 }, stale: true }),
    );
    await vi.waitFor(async () =>
      expect(await a.table(table).get('k')).toMatchObject({ value: { n: 2 }, stale: false }),
    );
    await vi.waitFor(async () =>
      expect(await b.table(table).get('k')).toMatchObject({ value: { n: 2 }, stale: false }),
    );
    expect(source.calls()).toBe(2);
  });

  it("writes DELETE's tombstone for an id Valkey does not hold", async () => {
    const table = uniqueTable('soft-del-absent');
    const raw = scopedValkey();
    const a = await openStore({ [table]: { load: () => ({ from: 'source' }) } });
    await a.table(table).invalidate('k', { soft: true });
    expect(isTombstone(await readEnvelope(raw, table, 'k'))).toBe(true);
  });
});

describe('poisoned L2 values', () => {
  it('a value nested too deeply for JSON.stringify is answered as its stored text, never re-serialised', async () => {
    const table = uniqueTable('deep');
    const raw = scopedValkey();
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: () => {
          loads++;
          return { fine: true };
        },
      },
    });
    for (const depth of [9_000, 500_000]) {
      const deep = `${'['.repeat(depth)}${']'.repeat(depth)}`;
      expect(() => JSON.stringify(JSON.parse(deep))).toThrow(RangeError);
      await plantEnvelope(raw, table, `d${depth}`, { value: null, json: deep });
      const r = await store.table(table).get(`d${depth}`);
      expect(r.layer).toBe('l2');
      expect(r.found && r.json === deep).toBe(true);
    }
    expect(loads).toBe(0);
  });

  it('an envelope with a non-integer or absurd softExpiresAt is a miss', async () => {
    const table = uniqueTable('absurd');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: () => ({ fine: true }) } });
    await raw.set(`ecc:${table}:{a}`, 'E3|1|1e300|1e300|1|0|0|||{"bad":1}');
    await raw.set(`ecc:${table}:{b}`, `E3|1|${'9'.repeat(40)}|${'9'.repeat(40)}|1|0|0|||{"bad":1}`);
    for (const id of ['a', 'b']) {
      const r = await store.table(table).get(id);
      expect(r.found && r.value).toEqual({ fine: true });
      expect(r.ttlMs).toBeLessThan(1_000_000);
    }
  });
});

describe('printable ids', () => {
  it('rejects format, separator and noncharacter code points with ECC_BAD_ID', async () => {
    const table = uniqueTable('printable');
    const store = await openStore({ [table]: { load: (id) => ({ id }) } });
    for (const id of [
      'a\u202Eb',
      'zero\u200Bwidth',
      '\uFEFFbom',
      'line\u2028sep',
      'non\uFFFF',
      'x\uFDD0',
    ]) {
      expect((await errorOf(store.table(table).get(id))).code, JSON.stringify(id)).toBe(
        'ECC_BAD_ID',
      );
    }
    const ok = await store.table(table).get('café-日本-😀');
    expect(ok.found).toBe(true);
  });
});
