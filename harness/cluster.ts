/**
 * A local Valkey/Redis Cluster owned by a drill or a test: `primaries`
 * primaries with `replicas` replicas each (3 + 3 by default), started with
 * `--cluster-enabled yes` on free loopback ports below 32768 (each node's bus
 * port, port + 10000, must be free too), joined by `redis-cli --cluster create
 * … --cluster-replicas 1 --cluster-yes`, and stopped by pid.
 *
 * The nodes run with `cluster-require-full-coverage no`, so that the shards
 * that are up keep answering while one shard has no primary, and a short
 * `cluster-node-timeout`, so that a failover takes seconds, not the default
 * 15 s. `replica-validity-factor 0` lets a replica be promoted however long
 * it was cut off.
 *
 * With `secure` (harness/secure.ts) the nodes are TLS-only (`--port 0`,
 * `--tls-port`, `--tls-cluster yes`, `--tls-replication yes`, client
 * certificates required), the `default` user has the admin password and the
 * service has an ACL user of its own; `valkey` is then the service's section for it.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { ValkeyOptions } from '../src/valkey/client.js';
import { cliArgs, type Secure } from './secure.js';
import {
  ask,
  firstOnPath,
  isRunning,
  type ValkeyServer,
  type ValkeyServerOptions,
} from './valkey-server.js';
import { openValkeySet, settle } from './valkey-set.js';

const run = promisify(execFile);

/** Options of {@link spawnCluster}. */
export interface ClusterOptions {
  /** Primaries (each owns an equal share of the 16384 slots). Default 3, at least 3. */
  primaries?: number;
  /** Replicas per primary. Default 1. */
  replicas?: number;
  /** `cluster-node-timeout`, ms: how long a silent primary takes to be failed over. Default 1,000. */
  nodeTimeoutMs?: number;
  /** Called with every process spawned, e.g. to kill it if the caller exits early. */
  track?: ValkeyServerOptions['track'];
  /** How long the cluster may take to form (every node says `cluster_state:ok`), ms. Default 30,000. */
  readyTimeoutMs?: number;
  /**
   * TLS only, an admin password and the service's ACL user (see harness/secure.ts); `true`
   * makes a fresh CA and passwords in the cluster's directory. Default (or `false`): plain, no AUTH.
   */
  secure?: Secure | boolean;
}

/** One node of the cluster and its role when the cluster formed. */
export interface ClusterNode extends ValkeyServer {
  /** `127.0.0.1:<port>`, the form `CLUSTER SLOTS` and ioredis use. */
  address: string;
}

/** A running cluster the caller controls. */
export interface LocalCluster {
  /** Every node, primaries first (as `redis-cli --cluster create` was given them). */
  nodes: ClusterNode[];
  /** `host:port` of every node: the seed list of `valkey.cluster.nodes`. */
  seeds: string[];
  /** The certificates and credentials, when started `secure`. */
  secure: Secure | undefined;
  /** The service's `valkey` section: the seeds, and with `secure` its TLS files and ACL user. */
  valkey: ValkeyOptions;
  /** The node that currently owns `slot` as a primary (asked of a live node), or undefined. */
  primaryOf(slot: number): Promise<ClusterNode | undefined>;
  /**
   * Resolves once every live node says `cluster_state:ok` and agrees on each
   * slot's primary, and every slot's primary is alive (after a primary is
   * killed: once its replica has taken over).
   */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** SIGKILLs every node (idempotent) and removes the nodes' files. */
  stop(): Promise<void>;
}

/** The first of `valkey-cli`, `redis-cli` on the PATH (`redis-cli --cluster create` joins the nodes). */
export function cliBinary(): string {
  const bin = firstOnPath(['valkey-cli', 'redis-cli']);
  if (bin === undefined) {
    throw new Error('no valkey-cli or redis-cli on the PATH (apt-get install -y redis-tools)');
  }
  return bin;
}

/**
 * Starts and joins a cluster, and waits until it is healthy (about 2 s for
 * 3 + 3 on a laptop).
 *
 * @throws {Error} when a node does not start, `redis-cli --cluster create`
 *   fails, or the cluster is not healthy within `readyTimeoutMs`; every node
 *   started is stopped first.
 */
export async function spawnCluster(options: ClusterOptions = {}): Promise<LocalCluster> {
  const primaries = options.primaries ?? 3;
  const replicas = options.replicas ?? 1;
  if (primaries < 3) throw new Error('a cluster needs at least 3 primaries');
  const set = openValkeySet('echostore-cluster-', options.secure, options.track);
  const { secure } = set;
  const ports: number[] = [];
  for (let i = 0; i < primaries * (1 + replicas); i++) ports.push(await set.port());
  try {
    const nodes: ClusterNode[] = await Promise.all(
      ports.map(async (port) => {
        const args = [
          ...['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`],
          ...['--cluster-node-timeout', String(options.nodeTimeoutMs ?? 1_000)],
          ...['--cluster-require-full-coverage', 'no', '--cluster-replica-validity-factor', '0'],
        ];
        const node = await set.node(port, args, ['--tls-cluster', 'yes']);
        // Object.assign keeps the server's getters (`process`, `pid`), which follow restarts.
        return Object.assign(node, { address: `127.0.0.1:${port}` });
      }),
    );
    const seeds = nodes.map((n) => n.address);
    await run(
      cliBinary(),
      [
        ...(secure === undefined ? [] : cliArgs(secure)),
        ...[
          '--cluster',
          'create',
          ...seeds,
          '--cluster-replicas',
          String(replicas),
          '--cluster-yes',
        ],
      ],
      { timeout: options.readyTimeoutMs ?? 30_000 },
    );
    const cluster: LocalCluster = {
      nodes,
      seeds,
      secure,
      valkey: { cluster: { nodes: seeds }, ...set.serviceAuth },
      primaryOf: (slot) => primaryOf(nodes, slot),
      waitHealthy: (timeoutMs = 30_000) => waitHealthy(nodes, timeoutMs),
      stop: set.stop,
    };
    await cluster.waitHealthy(options.readyTimeoutMs ?? 30_000);
    await replicasInSync(nodes, options.readyTimeoutMs ?? 30_000);
    return cluster;
  } catch (err) {
    await set.stop();
    throw err;
  }
}

/** Each slot range's primary as one node sees it: `start end host:port`. */
async function slotMap(node: ClusterNode): Promise<string[]> {
  const ranges = await ask(node, (r) => r.cluster('SLOTS'));
  return ranges
    .map(([start, end, primary]) => `${start} ${end} ${primary?.[0]}:${primary?.[1]}`)
    .sort((a, b) => Number(a.split(' ')[0]) - Number(b.split(' ')[0]));
}

async function primaryOf(nodes: ClusterNode[], slot: number): Promise<ClusterNode | undefined> {
  for (const node of nodes.filter(isRunning)) {
    try {
      const ranges = await ask(node, (r) => r.cluster('SLOTS'));
      const primary = ranges.find(([start, end]) => slot >= start && slot <= end)?.[2];
      if (primary === undefined) return undefined;
      const address = `${primary[0]}:${primary[1]}`;
      return nodes.find((n) => n.address === address);
    } catch {
      // that node does not answer: ask the next
    }
  }
  return undefined;
}

function waitHealthy(nodes: ClusterNode[], timeoutMs: number): Promise<void> {
  return settle(
    timeoutMs,
    100,
    async () => {
      const up = nodes.filter(isRunning);
      const infos = await Promise.all(up.map((n) => ask(n, (r) => r.cluster('INFO'))));
      const maps = await Promise.all(up.map(slotMap));
      const first = maps[0]?.join(',');
      // Slots served by a live primary: a killed primary keeps its slots until its replica takes over.
      const live = new Set(up.map((n) => n.address));
      const covered = (maps[0] ?? []).reduce((n, line) => {
        const [start, end, owner] = line.split(' ') as [string, string, string];
        return live.has(owner) ? n + Number(end) - Number(start) + 1 : n;
      }, 0);
      const healthy =
        infos.every((i) => String(i).includes('cluster_state:ok')) &&
        maps.every((m) => m.join(',') === first) &&
        covered === 16_384;
      return (
        healthy ||
        `states ${infos.map((i) => /cluster_state:(\w+)/.exec(String(i))?.[1]).join('/')}, ${covered} slots covered`
      );
    },
    (last) => `the cluster is not healthy: ${last}`,
  );
}

/** Resolves once every replica says `master_link_status:up` (a failover needs a replica in sync). */
function replicasInSync(nodes: ClusterNode[], timeoutMs: number): Promise<void> {
  return settle(
    timeoutMs,
    100,
    async () => {
      const infos = await Promise.all(nodes.map((n) => ask(n, (r) => r.info('replication'))));
      const replicas = infos.filter((i) => /role:slave/.test(i));
      return replicas.length > 0 && replicas.every((i) => /master_link_status:up/.test(i))
        ? true
        : 'out of sync';
    },
    () => 'the replicas did not sync with their primaries',
  );
}

/** A slot held half-moved by {@link beginSlotMove}: MIGRATING on `from`, IMPORTING on `to`. */
export interface SlotMove {
  slot: number;
  /** The primary that owned the slot (MIGRATING). */
  from: ClusterNode;
  /** The primary it moves to (IMPORTING). */
  to: ClusterNode;
  /** `MIGRATE`s `keys` (those of them that exist) from `from` to `to`; the slot stays half-moved. */
  moveKeys(keys: string[]): Promise<void>;
  /** `MIGRATE`s every key left in the slot, then `CLUSTER SETSLOT <slot> NODE <to>` on every primary. */
  finish(): Promise<void>;
}

/**
 * Starts moving `slot` by hand, as `redis-cli --cluster reshard` does, and
 * leaves it there: `CLUSTER SETSLOT <slot> IMPORTING` on the target (another
 * primary than the owner, or `to`), then `MIGRATING` on the owner. Every key
 * stays on the owner until {@link SlotMove.moveKeys} or {@link SlotMove.finish}.
 *
 * @throws {Error} when the slot has no live primary or there is no other primary.
 */
export async function beginSlotMove(
  cluster: LocalCluster,
  slot: number,
  to?: ClusterNode,
): Promise<SlotMove> {
  const from = await cluster.primaryOf(slot);
  if (from === undefined) throw new Error(`slot ${slot} has no live primary`);
  const primaries = await livePrimaries(cluster.nodes);
  const target = to ?? primaries.find((n) => n !== from);
  if (target === undefined) throw new Error('no other primary to move the slot to');
  const [fromId, toId] = await Promise.all(
    [from, target].map((n) => ask(n, (r) => r.cluster('MYID'))),
  );
  await ask(target, (r) => r.cluster('SETSLOT', slot, 'IMPORTING', fromId as string));
  await ask(from, (r) => r.cluster('SETSLOT', slot, 'MIGRATING', toId as string));
  const migrate = (keys: string[]) =>
    keys.length === 0
      ? Promise.resolve()
      : ask(from, async (r) => {
          await r.migrate('127.0.0.1', target.port, '', 0, 5_000, 'REPLACE', 'KEYS', ...keys);
        });
  return {
    slot,
    from,
    to: target,
    moveKeys: migrate,
    async finish() {
      for (;;) {
        const keys = await ask(from, (r) => r.cluster('GETKEYSINSLOT', slot, 100));
        if (keys.length === 0) break;
        await migrate(keys);
      }
      for (const n of [target, from, ...primaries.filter((p) => p !== from && p !== target)]) {
        await ask(n, (r) => r.cluster('SETSLOT', slot, 'NODE', toId as string));
      }
    },
  };
}

/** The live nodes that say they are primaries (`ROLE`). */
export async function livePrimaries(nodes: ClusterNode[]): Promise<ClusterNode[]> {
  const roles = await Promise.all(
    nodes.filter(isRunning).map(async (n) => {
      const role = (await ask(n, (r) => r.call('ROLE'))) as string[];
      return role[0] === 'master' ? [n] : [];
    }),
  );
  return roles.flat();
}
