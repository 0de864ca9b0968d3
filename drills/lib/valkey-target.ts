/**
 * Where a drill's stores and services find Valkey: the server at `--valkey`,
 * or, with `--cluster`, a local 3-primary + 3-replica cluster the drill starts
 * itself (harness/cluster.ts) and stops at the end; with `--secure` too, that
 * cluster TLS-only with client certificates, the stores and services
 * connecting as an ACL user with only the service's rights (harness/secure.ts).
 */
import { Cluster, type Redis } from 'ioredis';
import { type LocalCluster, spawnCluster } from '../../harness/cluster.js';
import { adminConnection } from '../../harness/secure.js';
import type { ValkeyOptions } from '../../src/valkey/client.js';
import { redactUrl } from '../../src/valkey/client.js';
import { Reaper } from './reaper.js';
import { connectAdmin } from './store.js';

/** The Valkey a drill runs against. */
export interface DrillValkey {
  /** `createStore`'s `valkey` option (JSON: it travels to forked workers). */
  target: string | ValkeyOptions;
  /** The `valkey` section of a service's config file. */
  section: Record<string, unknown>;
  /** For the report: the redacted URL, or `cluster 3+3 (<seed>, …)`. */
  label: string;
  /** A connection for the drill's own housekeeping (deleting the run's keys). */
  admin: Redis | Cluster;
  /** The cluster the drill started, when `--cluster`. */
  cluster: LocalCluster | undefined;
  /** Disconnects `admin` and stops the cluster the drill started. */
  close(): Promise<void>;
}

/**
 * The drill's Valkey: `url` (which must answer), or with `cluster` a fresh
 * local 3+3 cluster whose processes a {@link Reaper} kills if the drill dies
 * (`secure`: TLS + ACL, see the file's comment).
 *
 * @throws {Error} when the server does not answer or the cluster does not form, or
 *   `secure` is asked without `cluster`.
 */
export async function drillValkey(
  url: string,
  cluster: boolean,
  secure = false,
): Promise<DrillValkey> {
  if (secure && !cluster) throw new Error('--secure needs --cluster');
  if (!cluster) {
    const admin = await connectAdmin(url);
    return {
      target: url,
      section: { url },
      label: redactUrl(url),
      admin,
      cluster: undefined,
      close: async () => admin.disconnect(),
    };
  }
  const reaper = new Reaper();
  const local = await spawnCluster({ track: (c) => reaper.track(c), secure });
  const admin = new Cluster(
    local.seeds.map((s) => `redis://${s}`),
    {
      enableReadyCheck: true,
      ...(local.secure === undefined ? {} : { redisOptions: adminConnection(local.secure) }),
    },
  );
  admin.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    admin.once('ready', resolve);
    setTimeout(() => reject(new Error('the drill cluster did not become ready')), 10_000).unref();
  });
  return {
    target: local.valkey,
    section: { ...local.valkey },
    label: `cluster 3+3${local.secure === undefined ? '' : ', TLS + ACL user'} (${local.seeds.join(', ')})`,
    admin,
    cluster: local,
    async close() {
      admin.disconnect();
      await local.stop();
      reaper.killAll();
    },
  };
}
