/**
 * Batch reads on a cluster: the reads of one `getMany` are grouped per node,
 * one round trip and one socket write to each primary, not one per id.
 * Round trips are counted at the wire: every node sits behind a counting
 * proxy, which the cluster client reaches through a NAT map (the addresses
 * the nodes hand out are mapped to their proxies); writes at each node
 * socket's `_write`/`_writev` (what it hands the kernel: the proxy, in this
 * process, cannot tell writes apart that the kernel has merged).
 */
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalCluster, spawnCluster } from '../harness/cluster.js';
import { valueKey } from '../src/l2/keys.js';
import { keySlot } from '../src/valkey/slots.js';
import { type LatencyProxy, latencyProxy } from './helpers/latency-proxy.js';
import { openStore, plantEnvelope } from './helpers/probe.js';
import { countingLoader, uniqueTable } from './helpers/store.js';

let cluster: LocalCluster;
beforeAll(async () => {
  cluster = await spawnCluster();
}, 60_000);
afterAll(() => cluster?.stop());

describe('getMany on a cluster', () => {
  it('reads 60 ids held in Valkey in one round trip and one write per primary', async () => {
    const proxies = new Map<string, LatencyProxy>();
    for (const node of cluster.nodes) {
      proxies.set(node.address, await latencyProxy(node.url, 20));
    }
    const natMap = Object.fromEntries(
      [...proxies].map(([address, p]) => [
        address,
        { host: '127.0.0.1', port: Number(new URL(p.url).port) },
      ]),
    );
    const client = new Cluster(
      cluster.seeds.map((s) => natMap[s] as { host: string; port: number }),
      {
        natMap,
        enableOfflineQueue: false,
        redisOptions: {
          commandTimeout: 2_000,
          maxRetriesPerRequest: 0,
          enableAutoPipelining: false,
        },
      },
    );
    client.on('error', () => {});
    await new Promise((resolve) => client.once('ready', resolve));
    const table = uniqueTable('cluster-batch');
    const ids = Array.from({ length: 60 }, (_, i) => `b${i}`);
    await Promise.all(
      ids.map((id) => plantEnvelope(client as never, table, id, { value: { id } })),
    );
    const loader = countingLoader();
    const store = await openStore({ [table]: { load: loader.load } }, { valkey: client });
    const t = store.table(table);
    // The first script call on each connection may need a second trip (NOSCRIPT, then EVAL).
    await t.getMany([
      'warm-1',
      'warm-2',
      'warm-3',
      'warm-4',
      'warm-5',
      'warm-6',
      'warm-7',
      'warm-8',
    ]);
    // Those reads are answered as their fills are sent: each fill's answer comes before PING's
    // on its node (one connection, in order), so the round trips counted next are the batch's.
    await Promise.all(client.nodes('master').map((node) => node.ping()));
    const before = new Map([...proxies].map(([a, p]) => [a, { trips: p.roundTrips() }]));
    const writes = new Map<string, number>();
    for (const node of client.nodes('master')) {
      const stream = (node as unknown as { stream: Record<string, (...a: unknown[]) => unknown> })
        .stream;
      const key = `${node.options.host}:${node.options.port}`;
      writes.set(key, 0);
      for (const method of ['_write', '_writev']) {
        const original = stream[method] as (...a: unknown[]) => unknown;
        stream[method] = function (this: unknown, ...a: unknown[]) {
          writes.set(key, (writes.get(key) ?? 0) + 1);
          return original.apply(this, a);
        };
      }
    }
    const entries = await t.getMany(ids);
    expect(entries.every((e) => e.ok && e.result.found && e.result.layer === 'l2')).toBe(true);
    // The slot map holds the NAT-mapped addresses: the proxies'.
    const owners = new Set(ids.map((id) => client.slots[keySlot(valueKey(table, id))]?.[0]));
    expect(owners.size).toBe(3);
    // The primaries that own the ids: each was sent the reads together (other nodes may
    // see the client's own housekeeping meanwhile: slot refreshes, health probes).
    const byProxy = new Map(
      [...proxies].map(([address, p]) => [`127.0.0.1:${new URL(p.url).port}`, address]),
    );
    const counts = [...owners].map((proxied) => {
      const address = byProxy.get(proxied as string) as string;
      const p = proxies.get(address) as LatencyProxy;
      const was = before.get(address) as { trips: number };
      return { trips: p.roundTrips() - was.trips, writes: writes.get(proxied as string) };
    });
    expect(counts).toEqual([...owners].map(() => ({ trips: 1, writes: 1 })));
    client.disconnect();
  });
});
