import { describe, expect, it, onTestFinished } from 'vitest';
import { errorOf, metricValue, openStore, scopedValkey } from './helpers/probe.js';
import { spawnServer } from './helpers/server.js';
import { deferred, uniqueTable } from './helpers/store.js';

describe('writes win races', () => {
  it('a PUT on one instance refuses the fill of a load in flight on another (fleet)', async () => {
    const table = uniqueTable('put-race');
    const raw = scopedValkey();
    const gate = deferred<void>();
    const a = await openStore({
      [table]: {
        load: async () => {
          await gate.promise;
          return { from: 'source' };
        },
      },
    });
    const b = await openStore({ [table]: { load: () => ({ from: 'b-source' }) } });
    const loading = a.table(table).get('k');
    await new Promise((r) => setTimeout(r, 50));
    await b.table(table).put('k', { from: 'put' });
    gate.resolve();
    const answer = await loading;
    expect(answer.found && answer.value).toEqual({ from: 'source' });
    expect(JSON.parse((await raw.get(`ecc:${table}:{k}`)) as string).value).toEqual({
      from: 'put',
    });
    const next = await a.table(table).get('k');
    expect(next.found && next.value).toEqual({ from: 'put' });
  });

  it('a fill without the lease (coalescing: process) never overwrites a PUT made meanwhile', async () => {
    const table = uniqueTable('cas');
    const raw = scopedValkey();
    const gate = deferred<void>();
    const a = await openStore({
      [table]: {
        coalescing: 'process',
        load: async () => {
          await gate.promise;
          return { from: 'source' };
        },
      },
    });
    const b = await openStore({ [table]: { coalescing: 'process', load: () => ({}) } });
    const loading = a.table(table).get('k');
    await new Promise((r) => setTimeout(r, 50));
    await b.table(table).put('k', { from: 'put' });
    gate.resolve();
    await loading;
    expect(JSON.parse((await raw.get(`ecc:${table}:{k}`)) as string).value).toEqual({
      from: 'put',
    });
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
    await raw.ping();
    await new Promise((r) => setTimeout(r, 100));
    expect(JSON.parse((await raw.get(`ecc:${table}:{k}`)) as string).value).toEqual({
      from: 'put',
    });
  });

  it("an instance's own PUT wins in its L1 even over a row with a higher (foreign) version", async () => {
    const table = uniqueTable('own-wins');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: () => ({ from: 'source' }) } });
    const future = (Date.now() + 3 * 365 * 24 * 3600 * 1000) * 1000;
    await raw.set(
      `ecc:${table}:{k}`,
      `{"v":1,"version":${future},"softExpiresAt":${Date.now() + 60_000},"deltaMs":1,"value":{"old":true}}`,
      'PX',
      60_000,
    );
    const before = await store.table(table).get('k');
    expect(before.found && before.value).toEqual({ old: true });
    await store.table(table).put('k', { new: true });
    const after = await store.table(table).get('k');
    expect(after.found && after.value).toEqual({ new: true });
    expect(after.source).toBe('l1');
  });

  it('versions order after any version seen from a peer whose clock runs ahead (hybrid logical clock)', async () => {
    const table = uniqueTable('hlc');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: () => ({}) } });
    const ahead = (Date.now() + 30_000) * 1000;
    await raw.set(
      `ecc:${table}:{peer}`,
      `{"v":1,"version":${ahead},"softExpiresAt":${Date.now() + 60_000},"deltaMs":1,"value":1}`,
      'PX',
      60_000,
    );
    await store.table(table).get('peer');
    const { version } = await store.table(table).put('mine', 2);
    expect(version).toBeGreaterThan(ahead);
  });
});

describe('poisoned L2 values', () => {
  it('an envelope nested too deeply to re-serialise is a miss: reloaded, overwritten and counted', async () => {
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
    const deep = `${'['.repeat(9_000)}${']'.repeat(9_000)}`;
    await raw.set(
      `ecc:${table}:{d}`,
      `{"v":1,"version":1,"softExpiresAt":${Date.now() + 60_000},"deltaMs":1,"value":${deep}}`,
    );
    const r = await store.table(table).get('d');
    expect(r.found && r.value).toEqual({ fine: true });
    expect(loads).toBe(1);
    expect(JSON.parse((await raw.get(`ecc:${table}:{d}`)) as string).value).toEqual({ fine: true });
    expect(await metricValue(store, 'echostore_bad_envelopes_total', table)).toBeGreaterThanOrEqual(
      1,
    );
  });

  it('an envelope with a non-integer or absurd softExpiresAt is a miss', async () => {
    const table = uniqueTable('absurd');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { load: () => ({ fine: true }) } });
    await raw.set(
      `ecc:${table}:{a}`,
      '{"v":1,"version":1,"softExpiresAt":1e300,"deltaMs":1,"value":{"bad":1}}',
    );
    const r = await store.table(table).get('a');
    expect(r.found && r.value).toEqual({ fine: true });
    expect(r.ttlMs).toBeLessThan(1_000_000);
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
