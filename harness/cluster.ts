/**
 * A local Valkey/Redis Cluster owned by a drill or a test: 3 primaries with a replica each on
 * free loopback ports below 32768, joined by `redis-cli --cluster create`, stopped by pid. The
 * shards that are up answer while one has no primary (`cluster-require-full-coverage no`), and a
 * replica takes over within seconds (`cluster-node-timeout` 1 s) however long it was cut off
 * (`replica-validity-factor 0`). With `secure` the nodes are TLS-only, bus and replication too.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { ValkeyOptions } from '../src/valkey/client.js';
import { cliArgs } from './secure.js';
import { firstOnPath, running, settle } from './spawn.js';
import { ask, openValkeySet, type ValkeyServer, type ValkeySetOptions } from './valkey-server.js';

const run = promisify(execFile);

/** One node of the cluster; `address` is `127.0.0.1:<port>`, the form `CLUSTER SLOTS` and ioredis use. */
export type ClusterNode = ValkeyServer & { address: string };

/** A running cluster the caller controls (see {@link spawnCluster}). */
export type LocalCluster = Awaited<ReturnType<typeof spawnCluster>>;

/** The first of `valkey-cli`, `redis-cli` on the PATH (`redis-cli --cluster create` joins the nodes). */
function cliBinary(): string {
  const bin = firstOnPath(['valkey-cli', 'redis-cli']);
  if (bin !== undefined) return bin;
  throw new Error('no valkey-cli or redis-cli on the PATH (apt-get install -y redis-tools)');
}

/**
 * Starts and joins the cluster, and waits until it is healthy and every replica is in sync (about
 * 2 s on a laptop).
 *
 * @throws {Error} when a node does not start, `redis-cli --cluster create` fails, or the cluster
 *   is not healthy within 30 s; every node started is stopped first.
 */
export async function spawnCluster(options: ValkeySetOptions = {}) {
  const set = openValkeySet('echostore-cluster-', options);
  const { secure } = set;
  const ports = [];
  for (let i = 0; i < 6; i++) ports.push(await set.port());
  try {
    const nodes: ClusterNode[] = await Promise.all(
      ports.map(async (port) => {
        const args = [
          ...['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`],
          ...['--cluster-node-timeout', '1000'],
          ...['--cluster-require-full-coverage', 'no', '--cluster-replica-validity-factor', '0'],
        ];
        const node = await set.node(port, args, ['--tls-cluster', 'yes']);
        // Object.assign keeps the server's `process` getter, which follows restarts.
        return Object.assign(node, { address: `127.0.0.1:${port}` });
      }),
    );
    const seeds = nodes.map((n) => n.address);
    const auth = secure === undefined ? [] : cliArgs(secure);
    const cli = (args: string[], timeoutMs = 30_000) =>
      run(cliBinary(), [...auth, ...args], { timeout: timeoutMs });
    await cli(['--cluster', 'create', ...seeds, '--cluster-replicas', '1', '--cluster-yes']);
    await waitHealthy(nodes, 30_000, true);
    const valkey: ValkeyOptions = { cluster: { nodes: seeds }, ...set.serviceAuth };
    /**
     * `nodes`, primaries first (as `redis-cli --cluster create` was given them); `seeds`, their
     * `host:port` (`valkey.cluster.nodes`); `secure`, the certificates and credentials when
     * started so; `valkey`, the service's `valkey` section (the seeds, and with `secure` its TLS
     * files and ACL user); `primaryOf(slot)`, the node that owns `slot` now (asked of a live
     * node); `waitHealthy`, resolves once every live node says `cluster_state:ok`, all agree on
     * each slot's primary and it is alive (after a kill: once its replica took over); `cli(args,
     * timeoutMs)`, runs `redis-cli` as the admin; `stop`, SIGKILLs every node (idempotent) and
     * removes their files.
     */
    return {
      ...{ nodes, seeds, secure, valkey, cli, stop: set.stop },
      primaryOf: (slot: number) => primaryOf(nodes, slot),
      waitHealthy: (timeoutMs = 30_000) => waitHealthy(nodes, timeoutMs),
    };
  } catch (err) {
    await set.stop();
    throw err;
  }
}

/** Each slot range's primary as `node` sees it, by first slot: `[start, end, host:port]`. */
export async function slotMap(node: ClusterNode): Promise<Array<[number, number, string]>> {
  const ranges = await ask(node, (r) => r.cluster('SLOTS'));
  return ranges
    .map(([start, end, p]): [number, number, string] => [start, end, `${p?.[0]}:${p?.[1]}`])
    .sort((a, b) => a[0] - b[0]);
}

const live = (nodes: ClusterNode[]) => nodes.filter((n) => running(n.process));

async function primaryOf(nodes: ClusterNode[], slot: number): Promise<ClusterNode | undefined> {
  for (const node of live(nodes)) {
    const map = await slotMap(node).catch(() => undefined); // no answer: ask the next
    const range = map?.find(([start, end]) => slot >= start && slot <= end);
    if (range !== undefined) return nodes.find((n) => n.address === range[2]);
  }
  return undefined;
}

/** See `LocalCluster.waitHealthy`; with `inSync`, every replica also says `master_link_status:up`. */
function waitHealthy(nodes: ClusterNode[], timeoutMs: number, inSync = false): Promise<void> {
  return settle(
    timeoutMs,
    100,
    async () => {
      const up = live(nodes);
      const infos = await Promise.all(up.map((n) => ask(n, (r) => r.cluster('INFO'))));
      const maps = await Promise.all(up.map(slotMap));
      // Slots served by a live primary: a killed primary keeps its slots until its replica takes over.
      const addresses = new Set(up.map((n) => n.address));
      const served = (maps[0] ?? []).filter(([, , owner]) => addresses.has(owner));
      const covered = served.reduce((n, [start, end]) => n + end - start + 1, 0);
      const agreed = maps.every((m) => m.join(' ') === maps[0]?.join(' '));
      const states = infos.map((i) => /cluster_state:(\w+)/.exec(String(i))?.[1]);
      if (states.some((s) => s !== 'ok') || !agreed || covered < 16_384) {
        return `states ${states.join('/')}, ${covered} slots covered`;
      }
      if (!inSync) return true;
      const replication = await Promise.all(up.map((n) => ask(n, (r) => r.info('replication'))));
      const replicas = replication.filter((i) => /role:slave/.test(i));
      return (
        (replicas.length > 0 && replicas.every((i) => /master_link_status:up/.test(i))) ||
        'replicas out of sync'
      );
    },
    (last) => `the cluster is not healthy: ${last}`,
  );
}

/**
 * Starts moving `slot` by hand, as `redis-cli --cluster reshard` does, and leaves it half-moved:
 * `CLUSTER SETSLOT <slot> IMPORTING` on the target (`to`, or another primary than the owner),
 * then `MIGRATING` on the owner. Every key stays on the owner until `moveKeys` or `finish`.
 *
 * @throws {Error} when the slot has no live primary or there is no other primary.
 */
export async function beginSlotMove(cluster: LocalCluster, slot: number, to?: ClusterNode) {
  const from = await cluster.primaryOf(slot);
  if (from === undefined) throw new Error(`slot ${slot} has no live primary`);
  const primaries = await livePrimaries(cluster.nodes);
  const target = to ?? primaries.find((n) => n !== from);
  if (target === undefined) throw new Error('no other primary to move the slot to');
  const [fromId, toId] = (await Promise.all(
    [from, target].map((n) => ask(n, (r) => r.cluster('MYID'))),
  )) as [string, string];
  await ask(target, (r) => r.cluster('SETSLOT', slot, 'IMPORTING', fromId));
  await ask(from, (r) => r.cluster('SETSLOT', slot, 'MIGRATING', toId));
  /** `MIGRATE`s `keys` (those of them that exist) from `from` to `to`; the slot stays half-moved. */
  const moveKeys = async (keys: string[]) => {
    if (keys.length === 0) return;
    await ask(from, (r) =>
      r.migrate('127.0.0.1', target.port, '', 0, 5_000, 'REPLACE', 'KEYS', ...keys),
    );
  };
  /** `from` owned the slot (MIGRATING), `to` gets it (IMPORTING); `finish` `MIGRATE`s every key left, then `CLUSTER SETSLOT <slot> NODE <to>` on every primary. */
  return {
    ...{ slot, from, to: target, moveKeys },
    async finish(): Promise<void> {
      for (;;) {
        const keys = await ask(from, (r) => r.cluster('GETKEYSINSLOT', slot, 100));
        if (keys.length === 0) break;
        await moveKeys(keys);
      }
      for (const n of [target, from, ...primaries.filter((p) => p !== from && p !== target)]) {
        await ask(n, (r) => r.cluster('SETSLOT', slot, 'NODE', toId));
      }
    },
  };
}

/** The live nodes that say they are primaries (`ROLE`). */
export async function livePrimaries(nodes: ClusterNode[]): Promise<ClusterNode[]> {
  const up = live(nodes);
  const roles = await Promise.all(up.map((n) => ask(n, (r) => r.role())));
  return up.filter((_, i) => roles[i]?.[0] === 'master');
}
