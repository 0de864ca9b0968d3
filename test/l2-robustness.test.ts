// @module-tag cluster (a law test: npm run test:cluster runs it again on a local 3+3 cluster)
import { spawn } from 'node:child_process';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { freePort } from '../harness/free-port.js';
import { serverBinary } from '../harness/valkey-server.js';
import { createStore } from '../src/index.js';
import {
  heldProcessStore,
  isTombstone,
  metricValue,
  openStore,
  plantEnvelope,
  readEnvelope,
  scopedValkey,
  storedValue,
} from './helpers/probe.js';
import { delay, uniqueTable } from './helpers/store.js';

describe('foreign and broken data in L2', () => {
  it('a planted version beyond 2^53 is garbage: one load overwrites it, no flight is left spinning', async () => {
    const table = uniqueTable('bigv');
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
    const soft = Date.now() + 60_000;
    await raw.set(`ecc:${table}:{k}`, `E3|99999999999999999999|${soft}|${soft}|1|0|0|||{}`);
    const r = await store.table(table).get('k');
    expect(r.found && r.value).toEqual({ fine: true });
    expect(loads).toBe(1);
    // Fixed sleep, to show something has NOT happened: no flight keeps spinning on the garbage.
    await delay(50);
    expect(store.table(table).stats().flights).toBe(0);
    expect(await storedValue(raw, table, 'k')).toEqual({ fine: true });
  });

  it('a lease without an expiry, or of another type, is taken over instead of blocking the id', async () => {
    const table = uniqueTable('broken-lease');
    const raw = scopedValkey();
    const store = await openStore({ [table]: { waitTimeoutMs: 2_000, load: (id) => ({ id }) } });
    await raw.set(`ecc:${table}:{a}:lease`, 'garbage');
    await raw.hset(`ecc:${table}:{b}:lease`, 'x', 'y');
    for (const id of ['a', 'b']) {
      const r = await store.table(table).get(id);
      expect(r.found && r.layer).toBe('origin');
    }
  });

  it('a value key of another type is overwritten and never counts against Valkey health', async () => {
    const table = uniqueTable('wrongtype');
    const raw = scopedValkey();
    const fleet = await openStore({ [table]: { load: (id) => ({ id }) } });
    const plain = await openStore({
      [`${table}-p`]: { coalescing: 'process', load: (id) => ({ id }) },
    });
    for (let i = 0; i < 5; i++) {
      await raw.hset(`ecc:${table}:{w${i}}`, 'a', 'b');
      await raw.hset(`ecc:${table}-p:{w${i}}`, 'a', 'b');
    }
    for (let i = 0; i < 5; i++) {
      expect((await fleet.table(table).get(`w${i}`)).found).toBe(true);
      expect((await plain.table(`${table}-p`).get(`w${i}`)).found).toBe(true);
    }
    expect(fleet.valkeyReady()).toBe(true);
    expect(plain.valkeyReady()).toBe(true);
    expect(await raw.type(`ecc:${table}:{w0}`)).toBe('string');
    expect(await raw.type(`ecc:${table}-p:{w0}`)).toBe('string');
    await fleet.table(table).put('other', 1);
  });
});

describe('ordered writes', () => {
  it('Valkey orders a PUT after whatever the key holds, even a version from a clock far ahead', async () => {
    const table = uniqueTable('ordered');
    const raw = scopedValkey();
    const a = await openStore({ [table]: { load: () => ({ from: 'source' }) } });
    const b = await openStore({ [table]: { load: () => ({ from: 'source' }) } });
    const future = (Date.now() + 10 * 365 * 24 * 3600 * 1000) * 1000;
    await plantEnvelope(raw, table, 'k', { version: future, value: { planted: true } });
    expect(((await b.table(table).get('k')) as { value: unknown }).value).toEqual({
      planted: true,
    });
    const { version } = await a.table(table).put('k', { from: 'put' });
    expect(version).toBeGreaterThan(future);
    // B held the planted row: the PUT's event is newer, so B drops it and reads the PUT.
    await vi.waitFor(() => expect(b.table(table).stats().l1_entries).toBe(0));
    expect(((await b.table(table).get('k')) as { value: unknown }).value).toEqual({ from: 'put' });
  });

  it('a DELETE during a load without the lease (coalescing: process) is not undone by the fill', async () => {
    const table = uniqueTable('del-cas');
    const raw = scopedValkey();
    const { a, started, gate } = await heldProcessStore(table, { gen: 1 });
    const b = await openStore({ [table]: { coalescing: 'process', load: () => ({ gen: 2 }) } });
    const loading = a.table(table).get('k');
    await started.promise;
    await b.table(table).invalidate('k');
    gate.resolve();
    await loading;
    expect(isTombstone(await readEnvelope(raw, table, 'k'))).toBe(true);
    const fresh = await b.table(table).get('k');
    expect(fresh.found && fresh.value).toEqual({ gen: 2 });
  });
});

describe('coherence after a cold start', () => {
  it("an instance started while Valkey was down subscribes once it is up, and sees other instances' writes", async () => {
    const binary = serverBinary();
    if (binary === undefined) throw new Error('no redis-server/valkey-server on the PATH');
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}`;
    const table = uniqueTable('cold-sub');
    const early = await createStore({
      valkey: { url, connectTimeoutMs: 200 },
      readyTimeoutMs: 200,
      tables: { [table]: { load: () => ({ from: 'source' }) } },
    });
    onTestFinished(() => early.close(100));
    expect(early.valkeyReady()).toBe(false);
    const child = spawn(
      binary,
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      {
        stdio: 'ignore',
      },
    );
    onTestFinished(() => {
      child.kill('SIGKILL');
    });
    const raw = scopedValkey(url);
    await vi.waitFor(
      async () => {
        const channels = (await raw
          .pubsub('CHANNELS', `ecc:events:${table}`)
          .catch(() => [])) as string[];
        expect(channels, 'subscribed once the server is up').toHaveLength(1);
        expect(early.valkeyReady()).toBe(true);
      },
      { timeout: 10_000, interval: 50 },
    );
    await early.table(table).get('k');
    const late = await createStore({ valkey: url, tables: { [table]: { load: () => ({}) } } });
    onTestFinished(() => late.close(100));
    await late.table(table).put('k', { from: 'put' });
    await vi.waitFor(() => expect(early.table(table).stats().l1_entries).toBe(0));
    expect(((await early.table(table).get('k')) as { value: unknown }).value).toEqual({
      from: 'put',
    });
    expect(
      await metricValue(early, 'echostore_coherence_total', table, { result: 'applied' }),
    ).toBe(1);
  });
});
