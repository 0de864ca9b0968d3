/**
 * What the failover drill runs on and kills: a local 3+3 cluster (one primary
 * SIGKILLed; its replica takes over) or a Sentinel set (the primary
 * SIGKILLed; the Sentinels promote the replica).
 */
import { Cluster } from 'ioredis';
import { spawnCluster } from '../../harness/cluster.js';
import { adminConnection } from '../../harness/secure.js';
import { spawnSentinelSet } from '../../harness/sentinel.js';
import { valueKey } from '../../src/l2/keys.js';
import { keySlot } from '../../src/valkey/slots.js';
import { track } from './reaper.js';

/** Which side of the failover an id's keys live on. */
export type Side = 'lost' | 'other';

/** A topology with a victim chosen. */
export interface FailoverTopology {
  mode: 'cluster' | 'sentinel';
  /** For the report. */
  label: string;
  /** The `valkey` section of the services' config file (timeouts added by the drill). */
  section: Record<string, unknown>;
  /** `host:port` of the primary the drill kills. */
  victim: string;
  /** Whether `id`'s keys in `table` live on the victim's shard (before the kill). */
  sideOf(table: string, id: string): Side;
  /** SIGKILLs the victim. */
  kill(): Promise<void>;
  /** Resolves once a replica serves what the victim served. */
  waitPromoted(timeoutMs: number): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a 3+3 cluster (TLS + ACL with `secure`) and picks the primary of slot 0 as the victim. */
export async function clusterTopology(secure = false): Promise<FailoverTopology> {
  const cluster = await spawnCluster({ track, secure });
  const victim = (await cluster.primaryOf(0))?.address;
  // The slot map as it was before the kill, from a client of the drill's own.
  const admin = new Cluster(
    cluster.seeds.map((s) => `redis://${s}`),
    cluster.secure === undefined ? {} : { redisOptions: adminConnection(cluster.secure) },
  );
  admin.on('error', () => {});
  await new Promise<void>((resolve) => admin.once('ready', () => resolve()));
  const owners = admin.slots.map((nodes) => nodes?.[0]);
  admin.disconnect();
  if (victim === undefined) throw new Error('slot 0 has no primary');
  return {
    mode: 'cluster',
    label: `cluster 3+3${secure ? ', TLS + ACL user' : ''}, primary ${victim} (slot 0) killed`,
    section: { ...cluster.valkey },
    victim,
    sideOf: (table, id) => (owners[keySlot(valueKey(table, id))] === victim ? 'lost' : 'other'),
    kill: async () => cluster.nodes.find((n) => n.address === victim)?.kill(),
    waitPromoted: (timeoutMs) => cluster.waitHealthy(timeoutMs),
    stop: () => cluster.stop(),
  };
}

/**
 * Starts a primary, a replica and 3 Sentinels (TLS and passwords everywhere with `secure`);
 * the primary is the victim (the only shard).
 */
export async function sentinelTopology(secure = false): Promise<FailoverTopology> {
  const set = await spawnSentinelSet({ track, secure });
  const primary = await set.primary();
  if (primary === undefined) throw new Error('the Sentinels name no primary');
  const victim = `127.0.0.1:${primary.port}`;
  return {
    mode: 'sentinel',
    label: `Sentinel set (primary + replica, 3 Sentinels${secure ? '; TLS, ACL user, auth-pass' : ''}), primary ${victim} killed`,
    section: { ...set.valkey },
    victim,
    sideOf: () => 'lost',
    kill: () => primary.kill(),
    waitPromoted: async (timeoutMs) => {
      await set.waitFailover(primary, timeoutMs);
    },
    stop: () => set.stop(),
  };
}
