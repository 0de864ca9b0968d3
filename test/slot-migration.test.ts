/**
 * A slot in migration (resharding) on a real local cluster (3 primaries + 3
 * replicas, started here): with a slot held MIGRATING on its owner and
 * IMPORTING on its target — its values still on the owner, or some of them
 * moved — an item's two keys (value and lease) may sit on different nodes, so
 * a two-key script is answered `TRYAGAIN` for as long as the move lasts. Reads
 * must still come from L2 (counted at the source), writes must succeed, the
 * store must not go degraded, and the redirects and retries are counted.
 */
import { Cluster, type Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { beginSlotMove, type LocalCluster, spawnCluster } from '../harness/cluster.js';
import type { ReadResult } from '../src/index.js';
import { leaseKey, valueKey } from '../src/l2/keys.js';
import { keySlot } from '../src/valkey/slots.js';
import { metricValue, openStore, plantEnvelope, storedValue } from './helpers/probe.js';
import { countingLoader, deferred, uniqueTable } from './helpers/store.js';

const silent = pino({ level: 'silent' });

/** A store on `cluster` (closed when the test ends). */
function clusterStore(cluster: LocalCluster, tables: Parameters<typeof openStore>[0]) {
  return openStore(tables, {
    logger: silent,
    valkey: { cluster: { nodes: cluster.seeds }, commandTimeoutMs: 500, connectTimeoutMs: 1_000 },
  });
}

/** The value of a read (undefined for "not found"). */
async function answerOf(read: Promise<ReadResult>): Promise<unknown> {
  const r = await read;
  return r.found ? r.value : undefined;
}

/** The store-wide redirect counter `echostore_valkey_redirects_total{kind}`. */
async function redirects(store: Awaited<ReturnType<typeof openStore>>, kind: string) {
  const metric = store.registry.getSingleMetric('echostore_valkey_redirects_total');
  if (metric === undefined) return 0;
  const { values } = await metric.get();
  return values.filter((v) => v.labels.kind === kind).reduce((n, v) => n + Number(v.value), 0);
}

describe('a slot in migration', () => {
  let cluster: LocalCluster;
  beforeAll(async () => {
    cluster = await spawnCluster();
  });
  afterAll(() => cluster?.stop());

  /** Holds the slot of `table`/`id` half-moved until the test ends (then finishes the move). */
  async function holdSlot(table: string, id: string) {
    const move = await beginSlotMove(cluster, keySlot(valueKey(table, id)));
    onTestFinished(() => move.finish());
    return move;
  }

  /** A table, a writer that put `id` into L2, and a reader with a cold L1 on the same source. */
  async function warmed(prefix: string, id: string) {
    const table = uniqueTable(prefix);
    const source = countingLoader(5);
    const writer = await clusterStore(cluster, { [table]: { load: source.load } });
    const reader = await clusterStore(cluster, { [table]: { load: source.load } });
    await writer.table(table).get(id);
    expect(source.calls()).toBe(1);
    return { table, source, writer, reader };
  }

  it('serves an id from L2 while its value is still on the migrating owner: no source read, not degraded', async () => {
    const id = 'on-owner';
    const { table, source, reader } = await warmed('mig-owner', id);
    await holdSlot(table, id);
    const read = await reader.table(table).get(id);
    expect(read.layer).toBe('l2');
    expect(source.calls()).toBe(1);
    expect(reader.valkeyReady()).toBe(true);
    expect(await metricValue(reader, 'echostore_valkey_errors_total', table)).toBe(0);
    expect(await redirects(reader, 'tryagain')).toBeGreaterThan(0);
    expect(
      await metricValue(reader, 'echostore_valkey_retries_total', table, { op: 'lease' }),
    ).toBeGreaterThan(0);
  });

  it('serves a plain cache-aside table (coalescing: process) from L2 while its slot migrates', async () => {
    const table = uniqueTable('mig-plain');
    const id = 'plain';
    const source = countingLoader(5);
    const policy = { load: source.load, coalescing: 'process' as const };
    const writer = await clusterStore(cluster, { [table]: policy });
    const reader = await clusterStore(cluster, { [table]: policy });
    await writer.table(table).get(id);
    await holdSlot(table, id);
    expect((await reader.table(table).get(id)).layer).toBe('l2');
    expect(source.calls()).toBe(1);
    expect(
      await metricValue(reader, 'echostore_valkey_retries_total', table, { op: 'get' }),
    ).toBeGreaterThan(0);
  });

  it('serves an id from L2 once its value moved to the importing node (ASK): no source read', async () => {
    const id = 'on-target';
    const { table, source, reader } = await warmed('mig-target', id);
    const move = await holdSlot(table, id);
    await move.moveKeys([valueKey(table, id)]);
    const read = await reader.table(table).get(id);
    expect(read.layer).toBe('l2');
    expect(source.calls()).toBe(1);
    expect(reader.valkeyReady()).toBe(true);
    expect(await redirects(reader, 'ask')).toBeGreaterThan(0);
  });

  it('accepts a PUT and a DELETE of an id in a migrating slot, and another instance reads them', async () => {
    const id = 'written';
    const { table, source, writer, reader } = await warmed('mig-write', id);
    const move = await holdSlot(table, id);
    await writer.table(table).put(id, { put: 1 });
    expect(await answerOf(reader.table(table).get(id))).toEqual({ put: 1 });
    await move.moveKeys([valueKey(table, id), leaseKey(table, id)]);
    await writer.table(table).put(id, { put: 2 });
    const fresh = await clusterStore(cluster, { [table]: { load: source.load } });
    expect(await answerOf(fresh.table(table).get(id))).toEqual({ put: 2 });
    await writer.table(table).invalidate(id);
    const after = await clusterStore(cluster, { [table]: { load: source.load } });
    const reread = await after.table(table).get(id);
    expect(reread.layer).toBe('origin');
    expect(source.calls()).toBe(2);
    for (const s of [writer, reader, fresh, after]) {
      expect(s.valkeyReady()).toBe(true);
      expect(await metricValue(s, 'echostore_valkey_errors_total', table)).toBe(0);
    }
    expect(
      await metricValue(writer, 'echostore_valkey_retries_total', table, { op: 'put' }),
    ).toBeGreaterThan(0);
  });

  it('loads a cold id of a migrating slot once: its fill reaches L2 and another instance reads it there', async () => {
    const table = uniqueTable('mig-cold');
    const id = 'cold';
    const source = countingLoader(5);
    await holdSlot(table, id);
    const a = await clusterStore(cluster, { [table]: { load: source.load } });
    const b = await clusterStore(cluster, { [table]: { load: source.load } });
    const herd = await Promise.all(
      [a, b].flatMap((s) => Array.from({ length: 10 }, () => s.table(table).get(id))),
    );
    expect(new Set(herd.map((r) => (r.found ? r.json : '-'))).size).toBe(1);
    expect(source.calls()).toBe(1);
    const c = await clusterStore(cluster, { [table]: { load: source.load } });
    expect((await c.table(table).get(id)).layer).toBe('l2');
    expect(source.calls()).toBe(1);
    for (const s of [a, b, c]) {
      expect(await metricValue(s, 'echostore_valkey_errors_total', table)).toBe(0);
    }
  });

  it('lets a PUT made while a load runs in a migrating slot win over that load', async () => {
    const table = uniqueTable('mig-race');
    const id = 'raced';
    const source = countingLoader(0);
    const gate = deferred<void>();
    const loading = await clusterStore(cluster, {
      [table]: {
        load: async (x, ctx) => {
          await gate.promise;
          return source.load(x, ctx);
        },
      },
    });
    const writer = await clusterStore(cluster, { [table]: { load: source.load } });
    await holdSlot(table, id);
    const read = loading.table(table).get(id);
    await vi.waitFor(async () =>
      expect(
        await metricValue(loading, 'echostore_lease_total', table, { outcome: 'acquired' }),
      ).toBe(1),
    );
    await writer.table(table).put(id, { put: true });
    gate.resolve();
    await read;
    const fresh = await clusterStore(cluster, { [table]: { load: source.load } });
    expect(await answerOf(fresh.table(table).get(id))).toEqual({ put: true });
    expect(source.calls()).toBe(1);
  });

  it('refuses a fill whose value was replaced after its lease was taken, though the lease still holds', async () => {
    // What a PUT on its one-key path leaves for an instant: its value written, the lease not yet deleted.
    const table = uniqueTable('mig-mark');
    const id = 'marked';
    const gate = deferred<void>();
    const store = await clusterStore(cluster, {
      [table]: {
        load: async () => {
          await gate.promise;
          return { loaded: true };
        },
      },
    });
    const raw = new Cluster(cluster.seeds.map((n) => `redis://${n}`)) as unknown as Redis;
    raw.on('error', () => {});
    onTestFinished(() => raw.disconnect());
    const read = store.table(table).get(id);
    await vi.waitFor(async () => expect(await raw.get(leaseKey(table, id))).not.toBeNull());
    await plantEnvelope(raw, table, id, { value: { written: true }, version: 2 ** 50 });
    gate.resolve();
    await read;
    // The read is answered as the fill is sent; the refusal lands after.
    await vi.waitFor(async () =>
      expect(await metricValue(store, 'echostore_lease_total', table, { outcome: 'lost' })).toBe(1),
    );
    expect(await storedValue(raw, table, id)).toEqual({ written: true });
    expect(await raw.get(leaseKey(table, id))).toBeNull();
  });

  it('keeps working after the move ends (MOVED): the slot is read and written on its new owner', async () => {
    const id = 'moved';
    const { table, source, writer, reader } = await warmed('mig-done', id);
    const move = await beginSlotMove(cluster, keySlot(valueKey(table, id)));
    await move.finish();
    expect((await reader.table(table).get(id)).layer).toBe('l2');
    await writer.table(table).put(id, { after: true });
    const fresh = await clusterStore(cluster, { [table]: { load: source.load } });
    expect(await answerOf(fresh.table(table).get(id))).toEqual({ after: true });
    expect(source.calls()).toBe(1);
    expect(reader.valkeyReady()).toBe(true);
  });
});
