/**
 * What the failover drill runs on and kills: a local 3+3 cluster (one primary SIGKILLed; its
 * replica takes over) or a Sentinel set (the primary SIGKILLed; the Sentinels promote the replica).
 */
import { slotMap, spawnCluster } from '../../harness/cluster.js';
import { spawnSentinelSet } from '../../harness/sentinel.js';
import { valueKey } from '../../src/l2/keys.js';
import { keySlot } from '../../src/valkey/slots.js';

/** Which side of the failover an id's keys live on. */
export type Side = 'lost' | 'other';

/** A topology with a victim chosen. */
export interface FailoverTopology {
  /** For the report. */
  label: string;
  /** The `valkey` section of the services' config file (timeouts added by the drill). */
  section: Record<string, unknown>;
  /** Whether `id`'s keys in `table` live on the victim's shard (before the kill). */
  sideOf(table: string, id: string): Side;
  /** SIGKILLs the victim. */
  kill(): Promise<void>;
  /** Resolves once a replica serves what the victim served. */
  waitPromoted(timeoutMs: number): Promise<void>;
  stop(): Promise<void>;
}

/** Starts the topology of `mode` (TLS, ACL users and passwords everywhere with `secure`). */
export const startTopology = (mode: 'cluster' | 'sentinel', secure: boolean) =>
  mode === 'cluster' ? clusterTopology(secure) : sentinelTopology(secure);

/** Starts a 3+3 cluster (TLS + ACL with `secure`) and picks the primary of slot 0 as the victim. */
async function clusterTopology(secure = false): Promise<FailoverTopology> {
  const cluster = await spawnCluster({ secure });
  const victim = await cluster.primaryOf(0);
  if (victim === undefined) throw new Error('slot 0 has no primary');
  // The victim's slot ranges, as they were before the kill.
  const lost = (await slotMap(victim)).filter(([, , owner]) => owner === victim.address);
  const isLost = (slot: number) => lost.some(([start, end]) => slot >= start && slot <= end);
  return {
    label: `cluster 3+3${secure ? ', TLS + ACL user' : ''}, primary ${victim.address} (slot 0) killed`,
    section: { ...cluster.valkey },
    sideOf: (table, id) => (isLost(keySlot(valueKey(table, id))) ? 'lost' : 'other'),
    kill: () => victim.kill(),
    waitPromoted: (timeoutMs) => cluster.waitHealthy(timeoutMs),
    stop: () => cluster.stop(),
  };
}

/**
 * Starts a primary, a replica and 3 Sentinels (TLS and passwords everywhere with `secure`);
 * the primary is the victim (the only shard).
 */
async function sentinelTopology(secure = false): Promise<FailoverTopology> {
  const set = await spawnSentinelSet({ secure });
  const primary = await set.primary();
  if (primary === undefined) throw new Error('the Sentinels name no primary');
  return {
    label: `Sentinel set (primary + replica, 3 Sentinels${secure ? '; TLS, ACL user, auth-pass' : ''}), primary 127.0.0.1:${primary.port} killed`,
    section: { ...set.valkey },
    sideOf: () => 'lost',
    kill: () => primary.kill(),
    waitPromoted: (timeoutMs) => set.waitFailover(primary, timeoutMs).then(() => {}),
    stop: () => set.stop(),
  };
}
