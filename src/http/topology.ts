/** What `/readyz` and the status page say of the Valkey deployment the store talks to. */
import type { Cluster, Redis } from 'ioredis';

/** The deployment: its mode and the nodes (primaries) the client knows now. */
export interface ValkeyTopology {
  /** `standalone`, `cluster`, or `sentinel` (a primary found through Sentinel). */
  mode: 'standalone' | 'cluster' | 'sentinel';
  /**
   * `host:port` of the server (standalone), the cluster's primaries as the
   * client's slot map has them, or the primary Sentinel named (`sentinel`,
   * with `master`); empty while not known.
   */
  nodes: string[];
  /** The Sentinel master name (`sentinel` mode only). */
  master?: string;
}

/** The topology of `valkey` as its ioredis client knows it now (no command sent). */
export function valkeyTopology(valkey: Redis | Cluster): ValkeyTopology {
  if ('isCluster' in valkey && valkey.isCluster) {
    const cluster = valkey as Cluster;
    const nodes = cluster.nodes('master').map((n) => `${n.options.host}:${n.options.port}`);
    return { mode: 'cluster', nodes: nodes.sort() };
  }
  const redis = valkey as Redis;
  const { sentinels, name, host, port } = redis.options;
  if (sentinels !== undefined && sentinels !== null && sentinels.length > 0) {
    const stream = (
      redis as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }
    ).stream;
    const at =
      stream?.remoteAddress === undefined ? [] : [`${stream.remoteAddress}:${stream.remotePort}`];
    return { mode: 'sentinel', nodes: at, master: name ?? '' };
  }
  return { mode: 'standalone', nodes: [`${host}:${port}`] };
}
