/**
 * Beyond one Valkey: the client for a Valkey/Redis Cluster, the client
 * options for a Sentinel-managed primary, and the start-up checks that turn a
 * wrong seed list into a clear error naming the field.
 */
import type { ConnectionOptions } from 'node:tls';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { ConfigError } from '../errors.js';
import {
  type Credentials,
  type PasswordSource,
  passwordFrom,
  passwordSource,
  refreshPassword,
} from './credentials.js';

/** `valkey.cluster`: a Valkey/Redis Cluster, found through its seed nodes. */
export interface ClusterSettings {
  /** Seed nodes, `host:port` (any nodes of the cluster; the rest are discovered). At least one. */
  nodes: string[];
}

/**
 * `valkey.sentinel`: a primary with replicas, watched by Sentinels. Its
 * `username` and `password`/`passwordFile` are the Sentinels' own (their
 * `requirepass` or ACL user); the primary's are `valkey.username`….
 */
export interface SentinelSettings extends Credentials {
  /** Sentinels, `host:port`. At least one. */
  sentinels: string[];
  /** The name the Sentinels monitor the primary under (`sentinel monitor <name> …`). */
  name: string;
}

/**
 * How long to wait before reconnect `attempt` (1, 2, …), ms: doubles from
 * 100 ms and stays at 2,000 ms from the 6th attempt on. The one back-off of
 * the store's connections to Valkey, to its cluster nodes and to Sentinels.
 */
export const reconnectBackoff = (attempt: number): number =>
  Math.min(50 * 2 ** Math.min(attempt, 6), 2_000);

/** `host:port`, `[v6]:port`: the form of every node in the configuration. */
export const HOST_PORT_PATTERN = '^(\\[[0-9A-Fa-f:.]+\\]|[^\\s:/@\\[\\]]+):[0-9]{1,5}$';

/** A node address. */
export interface Address {
  host: string;
  port: number;
}

/**
 * Parses `host:port` (or `[v6]:port`).
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `field` when it is not of that form or the port is not 1–65535.
 */
export function parseAddress(text: string, field: string): Address {
  const match = new RegExp(HOST_PORT_PATTERN).exec(text);
  const port = Number(text.slice(text.lastIndexOf(':') + 1));
  if (match === null || !(port >= 1 && port <= 65_535)) {
    throw new ConfigError(`${field}: must be host:port with a port 1-65535 (got "${text}")`, {
      field,
    });
  }
  return { host: (match[1] as string).replace(/^\[|\]$/g, ''), port };
}

/**
 * Creates an ioredis `Cluster` on `settings.nodes` whose node connections use
 * `nodeOptions` (the single-server client's: command timeout, no retries per
 * request). Like the single-server client it never queues a command while a
 * node is unreachable, and it keeps retrying the cluster forever with a capped
 * back-off. It refreshes its slot map every 2 s besides on every `MOVED`, so a
 * promoted replica is found even by a shard whose commands the breaker holds back.
 *
 * Each node's connection is opened as soon as the node is known and the
 * cluster is ready, not on its first command: ioredis bounces the commands
 * that find a node's connection still opening (without an offline queue) and
 * retries them after `retryDelayOnFailover`, so a cold node would cost the
 * first burst of misses 100 ms each, and let a burst's later misses find
 * another instance's fill.
 */
export function createClusterClient(
  settings: ClusterSettings,
  nodeOptions: RedisOptions,
  password?: PasswordSource,
): Cluster {
  const {
    retryStrategy: _r,
    enableOfflineQueue: _q,
    lazyConnect: _l,
    ...redisOptions
  } = nodeOptions;
  // The pool creates each node's connection from these options, and the subscriber its own.
  if (password !== undefined) passwordFrom(redisOptions, password);
  const cluster = new Cluster(
    settings.nodes.map((n, i) => parseAddress(n, `valkey.cluster.nodes.${i}`)),
    {
      redisOptions,
      enableOfflineQueue: false,
      enableReadyCheck: true,
      slotsRefreshInterval: 2_000,
      slotsRefreshTimeout: nodeOptions.connectTimeout ?? 2_000,
      clusterRetryStrategy: reconnectBackoff,
    },
  );
  const open = (node: Redis) => {
    if (node.status === 'wait') node.connect().catch(() => {});
  };
  // Not before the cluster is ready: its ready check (`CLUSTER INFO`) goes to a random primary,
  // and one whose connection is still opening refuses it, which costs a reconnect with back-off.
  cluster.on('+node', (node: Redis) => {
    if (password !== undefined) refreshPassword(node, password);
    if (cluster.status === 'ready') open(node);
  });
  cluster.on('ready', () => {
    for (const node of cluster.nodes()) open(node);
  });
  return cluster;
}

/**
 * The ioredis options of a Sentinel-managed primary: the client asks the
 * Sentinels for the primary's address on every (re)connect (a dead primary
 * closes the connection; one demoted under a live connection answers
 * `READONLY`, on which every client reconnects: see `createValkeyClient`).
 * ioredis's `failoverDetector` is left off: its Sentinel connections outlive
 * `disconnect()` and report errors nobody listens to.
 *
 * With `tls`, the Sentinels and the primary are both reached over TLS with it.
 *
 * @returns the options, and where the Sentinels' password comes from on each connection.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming a malformed `valkey.sentinel.sentinels.<i>`,
 *   or the Sentinel credential field at fault (see {@link passwordSource}).
 */
export function sentinelOptions(
  settings: SentinelSettings,
  tls?: ConnectionOptions,
): { options: RedisOptions; password: PasswordSource } {
  const password = passwordSource(settings, 'valkey.sentinel');
  const now = password();
  return {
    options: {
      sentinels: settings.sentinels.map((s, i) =>
        parseAddress(s, `valkey.sentinel.sentinels.${i}`),
      ),
      name: settings.name,
      role: 'master',
      sentinelRetryStrategy: reconnectBackoff,
      ...(settings.username === undefined ? {} : { sentinelUsername: settings.username }),
      ...(now === undefined ? {} : { sentinelPassword: now }),
      ...(tls === undefined ? {} : { tls, sentinelTLS: tls, enableTLSForSentinelMode: true }),
    },
    password,
  };
}

/** How a start-up probe connects: TLS and credentials, as the store's own connections do. */
export interface ProbeOptions {
  tls?: ConnectionOptions;
  username?: string;
  password?: string;
}

/**
 * What one node said to a start-up probe: answered (with its `INFO` text; or
 * `refused`, the server's words, when it refused the credentials), or why not.
 */
type Probe = { ok: true; info: string; refused?: string } | { ok: false; reason: string };

/** The first line of a server's error, which never holds the password sent. */
const firstLine = (text: string) => text.split('\n')[0] ?? '';

/**
 * Refuses the start when every node that answered refused the credentials.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `field` (the password field; the user may be wrong instead).
 */
function checkCredentials(answers: Probe[], field: string, who: string): void {
  const answered = answers.filter((a) => a.ok);
  const refused = answered.flatMap((a) => (a.ok && a.refused !== undefined ? [a.refused] : []));
  if (answered.length > 0 && refused.length === answered.length) {
    throw new ConfigError(
      `${field}: every ${who} that answered refused the credentials (${refused[0]})`,
      {
        field,
      },
    );
  }
}

/** Connects once to `address` (no retry), runs `command`, and disconnects. */
async function probe(
  address: Address,
  timeoutMs: number,
  command: (r: Redis) => Promise<string>,
  connection: ProbeOptions = {},
): Promise<Probe> {
  // The options form: given as (port, host), ioredis reads an IPv6 host as a URL.
  const r = new Redis({
    ...connection,
    host: address.host,
    port: address.port,
    lazyConnect: true,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableReadyCheck: false,
  });
  let last: Error | undefined;
  r.on('error', (err: Error) => {
    last = err;
  });
  try {
    await r.connect();
    return { ok: true, info: await command(r) };
  } catch (err) {
    const reason = (last ?? (err as Error)).message;
    // A node answered. NOPERM (no right to this command) is the access check's business.
    if (/^NOPERM/.test((err as Error).message)) return { ok: true, info: '' };
    // A refused AUTH closes the connection: the command fails "Connection is closed", the reason is the error event's.
    const said = [(err as Error).message, reason].find((m) => /^(NOAUTH|WRONGPASS)/.test(m));
    if (said !== undefined) return { ok: true, info: '', refused: firstLine(said) };
    return { ok: false, reason };
  } finally {
    r.disconnect();
  }
}

/**
 * Start-up check of `valkey.cluster.nodes`: asks every seed, in parallel, for
 * `INFO cluster`.
 *
 * @returns the seeds that did not answer (`host:port (reason)`), when at least one did:
 *   the caller logs them; the client finds the cluster through the others.
 * @throws {ConfigError} `ECC_BAD_CONFIG` with `field` `valkey.cluster.nodes` when no seed
 *   answers within `timeoutMs`, `valkey.password` when every seed that answered refused the
 *   credentials (WRONGPASS, NOAUTH), or `valkey.cluster.nodes[i]` when seed `i` answers but
 *   is not in cluster mode.
 */
export async function checkClusterSeeds(
  settings: ClusterSettings,
  timeoutMs: number,
  connection: ProbeOptions = {},
): Promise<string[]> {
  const field = 'valkey.cluster.nodes';
  if (settings.nodes.length === 0) {
    throw new ConfigError(`${field}: must list at least one seed node`, { field });
  }
  const addresses = settings.nodes.map((n, i) => parseAddress(n, `${field}.${i}`));
  const answers = await Promise.all(
    addresses.map((a) => probe(a, timeoutMs, (r) => r.info('cluster'), connection)),
  );
  checkCredentials(answers, 'valkey.password', 'seed node');
  answers.forEach((a, i) => {
    if (a.ok && /cluster_enabled:0/.test(a.info)) {
      throw new ConfigError(
        `${field}.${i}: ${settings.nodes[i]} is not in cluster mode (cluster_enabled:0); use valkey.url for a single server`,
        { field: `${field}.${i}` },
      );
    }
  });
  const unreachable = answers.flatMap((a, i) =>
    a.ok ? [] : [`${settings.nodes[i]} (${a.reason})`],
  );
  if (unreachable.length === answers.length) {
    throw new ConfigError(
      `${field}: no seed node answered within ${timeoutMs} ms: ${unreachable.join(', ')}`,
      { field },
    );
  }
  return unreachable;
}

/**
 * Start-up check of `valkey.sentinel`: asks every Sentinel, in parallel, for
 * the address of the primary named `name`.
 *
 * @returns the Sentinels that did not answer, when at least one knows the primary.
 * @throws {ConfigError} `ECC_BAD_CONFIG` with `field` `valkey.sentinel.sentinels` when no
 *   Sentinel answers within `timeoutMs`, `valkey.sentinel.password` when every Sentinel that
 *   answered refused the credentials, or `valkey.sentinel.name` when none that answered
 *   monitors a primary of that name.
 */
export async function checkSentinels(
  settings: SentinelSettings,
  timeoutMs: number,
  connection: ProbeOptions = {},
): Promise<string[]> {
  const field = 'valkey.sentinel.sentinels';
  if (settings.sentinels.length === 0) {
    throw new ConfigError(`${field}: must list at least one Sentinel`, { field });
  }
  const addresses = settings.sentinels.map((s, i) => parseAddress(s, `${field}.${i}`));
  const answers = await Promise.all(
    addresses.map((a) =>
      probe(
        a,
        timeoutMs,
        async (r) => {
          const reply = (await r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', settings.name)) as
            | string[]
            | null;
          return reply === null ? '' : reply.join(':');
        },
        connection,
      ),
    ),
  );
  const unreachable = answers.flatMap((a, i) =>
    a.ok ? [] : [`${settings.sentinels[i]} (${a.reason})`],
  );
  if (unreachable.length === answers.length) {
    throw new ConfigError(
      `${field}: no Sentinel answered within ${timeoutMs} ms: ${unreachable.join(', ')}`,
      { field },
    );
  }
  checkCredentials(answers, 'valkey.sentinel.password', 'Sentinel');
  if (!answers.some((a) => a.ok && a.info !== '')) {
    throw new ConfigError(
      `valkey.sentinel.name: no Sentinel monitors a primary named "${settings.name}"`,
      { field: 'valkey.sentinel.name' },
    );
  }
  return unreachable;
}

/**
 * The start-up checks of a cluster or Sentinel configuration (nothing for a
 * single server, which may start degraded and connect later), over TLS and
 * with the credentials when given: the data nodes' for the seeds, the
 * Sentinels' own for the Sentinels.
 *
 * @returns the seed nodes or Sentinels that did not answer, when enough did.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `valkey.sentinel` when both `cluster` and
 *   `sentinel` are given; else what {@link checkClusterSeeds} and {@link checkSentinels} throw.
 */
export async function checkTopology(
  options: Credentials & {
    cluster?: ClusterSettings;
    sentinel?: SentinelSettings;
    connectTimeoutMs?: number;
  },
  tls?: ConnectionOptions,
): Promise<string[]> {
  const timeoutMs = options.connectTimeoutMs ?? 2_000;
  if (options.cluster !== undefined && options.sentinel !== undefined) {
    throw new ConfigError('valkey.sentinel: cannot be used with valkey.cluster (choose one)', {
      field: 'valkey.sentinel',
    });
  }
  const connection = (credentials: Credentials, field: string): ProbeOptions => {
    const password = passwordSource(credentials, field)();
    return {
      ...(tls === undefined ? {} : { tls }),
      ...(credentials.username === undefined ? {} : { username: credentials.username }),
      ...(password === undefined ? {} : { password }),
    };
  };
  if (options.cluster !== undefined) {
    return checkClusterSeeds(options.cluster, timeoutMs, connection(options, 'valkey'));
  }
  if (options.sentinel !== undefined) {
    const sentinel = options.sentinel;
    return checkSentinels(sentinel, timeoutMs, connection(sentinel, 'valkey.sentinel'));
  }
  return [];
}
