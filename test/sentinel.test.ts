/**
 * Sentinel mode on real local processes (a primary, a replica, 3 Sentinels,
 * started here): the store finds the primary through the Sentinels and
 * follows a failover without a restart.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type SentinelSet, spawnSentinelSet } from '../harness/sentinel.js';
import type { ReadResult, StoreOptions } from '../src/index.js';
import { errorOf, openStore } from './helpers/probe.js';
import { countingLoader, uniqueTable } from './helpers/store.js';

/** `fn` passes within 15 s (these tests share two cores with servers that fail over). */
const eventually = <T>(fn: () => T | Promise<T>) =>
  vi.waitFor(fn, { timeout: 15_000, interval: 50 });

let set: SentinelSet;
beforeAll(async () => {
  set = await spawnSentinelSet();
}, 60_000);
afterAll(() => set?.stop());

const valkey = (): StoreOptions['valkey'] => ({
  sentinel: { sentinels: set.addresses, name: set.name },
  commandTimeoutMs: 500,
  connectTimeoutMs: 1_000,
});

const answer = (r: ReadResult) => (r.found ? r.value : undefined);

describe('Sentinel mode', () => {
  it('reads and writes through the primary the Sentinels name, coherently across instances', async () => {
    const table = uniqueTable('sentinel');
    const source = countingLoader(20);
    const a = await openStore({ [table]: { load: source.load } }, { valkey: valkey() });
    const b = await openStore({ [table]: { load: source.load } }, { valkey: valkey() });
    const herd = await Promise.all(
      [a, b].flatMap((s) => Array.from({ length: 50 }, () => s.table(table).get('k'))),
    );
    expect(source.calls()).toBe(1);
    expect(new Set(herd.map((r) => r.version)).size).toBe(1);
    await a.table(table).put('k', { put: 1 });
    await eventually(async () => expect(answer(await b.table(table).get('k'))).toEqual({ put: 1 }));
  });

  it('refuses Sentinels that do not answer, and a name they do not monitor, naming the field', async () => {
    const load = () => 1;
    const cases: Array<[{ sentinels: string[]; name: string }, string]> = [
      [{ sentinels: ['127.0.0.1:1'], name: set.name }, 'valkey.sentinel.sentinels'],
      [{ sentinels: set.addresses, name: 'nobody' }, 'valkey.sentinel.name'],
      [{ sentinels: [], name: set.name }, 'valkey.sentinel.sentinels'],
    ];
    for (const [sentinel, field] of cases) {
      const err = await errorOf(
        openStore({ t: { load } }, { valkey: { sentinel, connectTimeoutMs: 500 } }),
      );
      expect(err.code).toBe('ECC_BAD_CONFIG');
      expect((err as { field?: string }).field).toBe(field);
      expect(err.message.startsWith(`${field}: `)).toBe(true);
    }
  });

  it('follows a failover without a restart: L1 answers meanwhile, then writes and coherence resume', async () => {
    const table = uniqueTable('sentinel-failover');
    const source = countingLoader(5);
    const policy = { load: source.load, loadTimeoutMs: 1_000, waitTimeoutMs: 2_000 };
    const a = await openStore({ [table]: policy }, { valkey: valkey() });
    const b = await openStore({ [table]: policy }, { valkey: valkey() });
    await a.table(table).get('hot');
    await b.table(table).get('hot');
    const old = (await set.primary()) as NonNullable<Awaited<ReturnType<SentinelSet['primary']>>>;
    await old.kill();
    // While no primary answers: L1 hits answer, misses go to the source, writes fail fast.
    expect((await a.table(table).get('hot')).layer).toBe('l1');
    expect((await a.table(table).get('cold')).layer).toBe('origin');
    await set.waitFailover(old);
    // No restart: the clients ask the Sentinels again and reach the promoted replica.
    await eventually(() => expect(a.valkeyReady() && b.valkeyReady()).toBe(true));
    await eventually(async () =>
      expect((await a.table(table).put('hot', { v: 2 })).version).toBeGreaterThan(0),
    );
    // B's subscriber followed too: its L1 row is dropped by A's write event.
    await eventually(async () => expect(answer(await b.table(table).get('hot'))).toEqual({ v: 2 }));
    const id = 'after';
    expect((await a.table(table).get(id)).stored).toBe(true);
    const reads = source.calls();
    expect((await b.table(table).get(id)).layer).toBe('l2');
    expect(source.calls()).toBe(reads);
  }, 60_000);
});
