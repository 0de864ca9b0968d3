/**
 * Test-side probes: open a store that closes itself after the test, capture a
 * rejection, read a metric, and talk to Valkey on a separate connection
 * (reading and planting envelopes in the one value format).
 */
import { randomBytes } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { expect, inject, onTestFinished, vi } from 'vitest';
import {
  createStore,
  type EchoStoreError,
  type Store,
  type StoreOptions,
} from '../../src/index.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from '../../src/l2/format.js';
import { valueKey } from '../../src/l2/keys.js';
import { adminConnection, deferred, valkeyCluster, valkeyTarget } from './store.js';

/** Creates a store on the shared test server or cluster (unless `options.valkey` says otherwise), closed when the test ends. */
export async function openStore(
  tables: StoreOptions['tables'],
  options: Partial<StoreOptions> = {},
): Promise<Store> {
  const store = await createStore({ valkey: valkeyTarget(), ...options, tables });
  onTestFinished(() => store.close(100));
  return store;
}

/** A store whose table loads without the lease (`coalescing: process`), each load held at `gate` once `started`. */
export async function heldProcessStore(table: string, value: unknown) {
  const gate = deferred<void>();
  const started = deferred<void>();
  const a = await openStore({
    [table]: {
      coalescing: 'process',
      load: async () => {
        started.resolve();
        await gate.promise;
        return value;
      },
    },
  });
  return { a, started, gate };
}

/**
 * A plain ioredis client on the shared test server, for looking at keys
 * behind the store's back; in a cluster run (and no `url`), a cluster client,
 * which answers the key commands the tests use alike.
 */
export function rawValkey(url?: string): Redis {
  const nodes = valkeyCluster();
  if (url === undefined && nodes !== undefined) {
    const cluster = new Cluster(
      nodes.map((n) => `redis://${n}`),
      { redisOptions: adminConnection() },
    );
    cluster.on('error', () => {});
    return cluster as unknown as Redis;
  }
  const raw = new Redis(url ?? inject('valkeyUrl'), { maxRetriesPerRequest: 0 });
  raw.on('error', () => {});
  return raw;
}

/**
 * Resolves with the error `promise` rejects with.
 *
 * @throws when `promise` resolves instead.
 */
export async function errorOf(promise: Promise<unknown>): Promise<EchoStoreError> {
  try {
    await promise;
  } catch (err) {
    return err as EchoStoreError;
  }
  throw new Error('expected a rejection, got a value');
}

/**
 * The value of a store metric for one table, summed over the samples whose
 * labels include `labels` (0 when there is none).
 */
export async function metricValue(
  store: Store,
  name: string,
  table: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const metric = store.registry.getSingleMetric(name);
  if (metric === undefined) throw new Error(`no metric named ${name}`);
  const { values } = await metric.get();
  return values
    .filter((v) => v.labels.table === table)
    .filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))
    .reduce((sum, v) => sum + Number(v.value), 0);
}

/**
 * `CLIENT LIST` of each server behind `raw` (every node of a cluster), with a
 * connection to that server to send `CLIENT KILL` on.
 */
export async function clientLists(raw: Redis): Promise<Array<{ server: Redis; list: string }>> {
  const servers = raw.isCluster ? (raw as unknown as Cluster).nodes('all') : [raw];
  return Promise.all(
    servers.map(async (server) => ({ server, list: (await server.client('LIST')) as string })),
  );
}

/** Like {@link rawValkey}, disconnected when the test ends. */
export function scopedValkey(url?: string): Redis {
  const raw = rawValkey(url);
  onTestFinished(() => {
    raw.disconnect();
  });
  return raw;
}

/**
 * Watches every command the server at `url` runs from now on (`MONITOR`, on
 * connections of its own, closed when the test ends). `carrying(text)`
 * answers the commands with an argument containing `text`, once the server's
 * MONITOR feed has shown everything the server ran before the call.
 */
export async function watchCommands(
  url: string,
): Promise<{ carrying(text: string): Promise<string[][]> }> {
  const client = new Redis(url, { maxRetriesPerRequest: 0 });
  client.on('error', () => {});
  const monitor = await client.monitor();
  monitor.on('error', () => {});
  const seen: string[][] = [];
  monitor.on('monitor', (_time: string, args: string[]) => seen.push(args));
  onTestFinished(() => {
    monitor.disconnect();
    client.disconnect();
  });
  return {
    async carrying(text) {
      // The feed is in the order the server ran the commands: once it shows this marker, it
      // has shown every command before it.
      const marker = `watch-${randomBytes(6).toString('hex')}`;
      await client.echo(marker);
      await vi.waitFor(() => expect(seen.some((args) => args.includes(marker))).toBe(true));
      return seen.filter((args) => args.some((a) => a.includes(text)));
    },
  };
}

/** Resolves once Valkey's clock is past `ms` (polled every 10 ms, for at most `timeoutMs`). */
export async function untilValkeyTime(raw: Redis, ms: number, timeoutMs = 5_000): Promise<void> {
  await vi.waitFor(async () => expect(await valkeyNowMs(raw)).toBeGreaterThan(ms), {
    timeout: timeoutMs,
    interval: 10,
  });
}

/**
 * Waits until Valkey holds `key`: a read is answered as its fill is sent, so a look from another
 * connection right after the answer may come before the fill (seen on a TLS cluster under load).
 */
export function landed(raw: Redis | Cluster, key: string): Promise<void> {
  return vi.waitFor(async () => expect(await raw.exists(key)).toBe(1));
}

/** The envelope of `table`/`id` as Valkey holds it: decoded, `null` when the key is absent, `'garbage'` when it does not decode. */
export async function readEnvelope(
  raw: Redis,
  table: string,
  id: string,
): Promise<Envelope | null | 'garbage'> {
  const text = await raw.get(valueKey(table, id));
  if (text === null) return null;
  return decodeEnvelope(text) ?? 'garbage';
}

/**
 * Writes an envelope for `table`/`id` behind the store's back (fresh for a
 * minute unless `fields` say otherwise), with `PX pxMs`.
 */
export async function plantEnvelope(
  raw: Redis,
  table: string,
  id: string,
  fields: Partial<Envelope> & { value: unknown },
  pxMs = 60_000,
): Promise<void> {
  const soft = fields.softExpiresAt ?? Date.now() + 60_000;
  const envelope: Envelope = {
    json: JSON.stringify(fields.value),
    version: 1,
    softExpiresAt: soft,
    hardExpiresAt: soft,
    deltaMs: 1,
    negative: false,
    ...fields,
  };
  await raw.set(valueKey(table, id), encodeEnvelope(envelope), 'PX', pxMs);
}

/** The value Valkey holds for `table`/`id` (decoded from its envelope), or `undefined` when absent or undecodable. */
export async function storedValue(raw: Redis, table: string, id: string): Promise<unknown> {
  const envelope = await readEnvelope(raw, table, id);
  return envelope === null || envelope === 'garbage' ? undefined : envelope.value;
}

/** A DELETE's tombstone: "not found", never fresh (its soft and hard expiry are the moment it was written, on Valkey's clock). */
export function isTombstone(envelope: Envelope | null | 'garbage'): boolean {
  return (
    envelope !== null &&
    envelope !== 'garbage' &&
    envelope.negative &&
    envelope.value === null &&
    envelope.softExpiresAt === envelope.hardExpiresAt &&
    envelope.softExpiresAt <= Date.now()
  );
}

/** Valkey's clock, epoch ms (the clock every stored expiry is on). */
export async function valkeyNowMs(raw: Redis): Promise<number> {
  const [sec, us] = (await raw.time()) as [number | string, number | string];
  return Number(sec) * 1000 + Math.floor(Number(us) / 1000);
}

/** Plants `value` in L2 as stale on Valkey's clock: past its soft TTL, within its hard TTL for `staleForMs`. */
export async function plantStale(
  raw: Redis,
  table: string,
  id: string,
  value: unknown,
  staleForMs = 60_000,
): Promise<void> {
  const now = await valkeyNowMs(raw);
  await plantEnvelope(
    raw,
    table,
    id,
    { value, version: now * 1000, softExpiresAt: now - 1, hardExpiresAt: now + staleForMs },
    staleForMs,
  );
}
