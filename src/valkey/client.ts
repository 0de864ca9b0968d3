import { type Cluster, Redis, type RedisOptions } from 'ioredis';
import {
  type Credentials,
  type PasswordSource,
  passwordSource,
  refreshPassword,
  tlsOptions,
  type ValkeyTlsOptions,
} from './credentials.js';
import {
  type ClusterSettings,
  createClusterClient,
  reconnectBackoff,
  type SentinelSettings,
  sentinelOptions,
} from './topology.js';

export { readCaFile, type ValkeyTlsOptions } from './credentials.js';

/**
 * How the store reaches Valkey: one server (`url`), a cluster (`cluster`) or
 * a Sentinel-managed primary (`sentinel`); with more than one, `cluster` wins,
 * then `sentinel`. All durations are milliseconds. `username` and
 * `password`/`passwordFile` are the data nodes' ACL user (on every node of a
 * cluster; the Sentinels' own are `sentinel.username`…).
 */
export interface ValkeyOptions extends Credentials {
  /** `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS. */
  url?: string;
  /** A Valkey/Redis Cluster, found through its seed nodes. */
  cluster?: ClusterSettings;
  /** A primary with replicas, found (and followed through failovers) through its Sentinels. */
  sentinel?: SentinelSettings;
  /** A command not answered within this fails (never hangs). Default 1,000. */
  commandTimeoutMs?: number;
  /** A connection attempt (TLS handshake included) not established within this fails and is retried. Default 2,000. */
  connectTimeoutMs?: number;
  /**
   * TLS settings. With `url`, used when it is `rediss://`; with `cluster`,
   * given means every node connection is TLS (the nodes run `tls-cluster yes`,
   * so the addresses they hand out are TLS ports); with `sentinel`, given means
   * TLS to the Sentinels and to the primary.
   */
  tls?: ValkeyTlsOptions;
}

/**
 * Creates an ioredis client (a `Cluster` for `options.cluster`) set up so
 * that no call can hang on a dead or
 * paused server: every command has `commandTimeout`; there is no offline
 * queue (a command issued while disconnected fails at once, and the store
 * falls back to the source); reconnection retries forever with capped
 * back-off, so the service recovers by itself when Valkey returns; a
 * `READONLY` reply (a demoted primary) reconnects at once.
 *
 * A `rediss://` URL connects over TLS, verified against `tls.caFile` when
 * given; a cluster or Sentinel set does with `tls` given. A refused password
 * or certificate is not thrown: the client keeps retrying (the store runs
 * degraded meanwhile). A `passwordFile` is read again before every
 * (re)connect, of every connection (each cluster node's, the subscriber's,
 * the Sentinels'). The client and its `duplicate()`s never expose the
 * password in the errors they emit.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming the `valkey.tls` file that cannot be read or
 *   holds no PEM block of its kind, or the credential field at fault (see {@link passwordSource}).
 */
export function createValkeyClient(options: ValkeyOptions): Redis | Cluster {
  const password = passwordSource(options, 'valkey');
  const redisOptions: RedisOptions = {
    commandTimeout: options.commandTimeoutMs ?? 1_000,
    connectTimeout: options.connectTimeoutMs ?? 2_000,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    // No auto-pipelining: ioredis sends one auto-pipeline per connection at a
    // time, so on a paused server a command could wait for the previous
    // pipeline's timeout before its own started (up to 2 × commandTimeout).
    enableAutoPipelining: false,
    retryStrategy: reconnectBackoff,
    reconnectOnError: reconnectOnReadOnly(),
    lazyConnect: false,
    ...(options.username === undefined ? {} : { username: options.username }),
    ...credentialOption(password),
  };
  const tls = options.tls === undefined ? undefined : tlsOptions(options.tls);
  if (options.cluster !== undefined) {
    return createClusterClient(
      options.cluster,
      { ...redisOptions, ...(tls === undefined ? {} : { tls }) },
      password,
    );
  }
  if (options.sentinel !== undefined) {
    const sentinel = sentinelOptions(options.sentinel, tls);
    return new ValkeyClient(
      { ...redisOptions, ...sentinel.options },
      {
        password,
        sentinelPassword: sentinel.password,
      },
    );
  }
  const url = options.url ?? 'redis://127.0.0.1:6379';
  // ioredis turns TLS on for a rediss:// URL with `tls: true` only when no `tls`
  // is given; an object keeps it on and adds our settings. Given for every
  // rediss:// URL (ioredis's own test is case-sensitive) so TLS is never dropped.
  if (usesTls(url)) redisOptions.tls = tls ?? tlsOptions({});
  const fromFile = options.passwordFile === undefined ? {} : { password };
  return new ValkeyClient(redisOptions, fromFile, url);
}

/** `password` for ioredis when there is one now (an absent password leaves the URL's in place). */
function credentialOption(password: PasswordSource): { password?: string } {
  const now = password();
  return now === undefined ? {} : { password: now };
}

/** Whether a connection to `url` uses TLS: a `rediss://` URL, in any case. */
export function usesTls(url: string): boolean {
  return /^rediss:\/\//i.test(url);
}

/**
 * Follows a failover: a `READONLY` reply means the server was demoted to a
 * replica, so the client reconnects (at most once a second), and a DNS name or
 * proxy that now points at the new primary is picked up. The failed command is
 * not resent (its caller already has its error).
 */
function reconnectOnReadOnly(): (err: Error) => boolean {
  let lastMs = Number.NEGATIVE_INFINITY;
  return (err) => {
    // As is, or inside a script's error ("READONLY … script: …", Redis 6's "ERR Error running script … -READONLY …").
    if (!/(^|[: -])READONLY /.test(err.message)) return false;
    const now = performance.now();
    if (now - lastMs < 1_000) return false;
    lastMs = now;
    return true;
  };
}

/**
 * An ioredis client whose emitted errors carry no credentials: ioredis puts a
 * failed command's arguments on its reply error (`err.command.args`), and for
 * AUTH those are the user and the password, which a logger would print.
 * `duplicate()` (the store's subscriber connection) returns one too.
 */
class ValkeyClient extends Redis {
  readonly #sources: PasswordSources;

  /**
   * @param sources where the data nodes' and the Sentinels' passwords come from on each
   *   (re)connect; one not given keeps the value in `options` (or in `url`).
   * @param url a `redis://` URL whose host, port, db and credentials come before `options`'.
   */
  constructor(options: RedisOptions, sources: PasswordSources, url?: string) {
    // ioredis merges its arguments, earlier ones winning: the URL, then the options.
    super(...((url === undefined ? [options] : [url, options]) as [RedisOptions]));
    this.#sources = sources;
    if (sources.password !== undefined) refreshPassword(this, sources.password);
    if (sources.sentinelPassword !== undefined)
      refreshPassword(this, sources.sentinelPassword, 'sentinelPassword');
  }

  override duplicate(override?: Partial<RedisOptions>): Redis {
    return new ValkeyClient({ ...this.options, ...override }, this.#sources);
  }

  // ioredis rejects the commands it flushes with the same error object
  // synchronously before emitting it, so their handlers (run later) see it redacted too.
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'error') redactAuthArgs(args[0]);
    return super.emit(event, ...args);
  }
}

/** Where a client's passwords come from on each (re)connect (see {@link refreshPassword}). */
interface PasswordSources {
  password?: PasswordSource;
  sentinelPassword?: PasswordSource;
}

function redactAuthArgs(err: unknown): void {
  const command = (err as { command?: { name?: unknown; args?: unknown } } | null)?.command;
  if (typeof command?.name !== 'string' || command.name.toLowerCase() !== 'auth') return;
  if (!Array.isArray(command.args)) return;
  // AUTH [user] password: the user may stay, it helps to tell which one was refused.
  command.args = command.args.length > 1 ? [command.args[0], '***'] : ['***'];
}

/**
 * Resolves when the client is ready, or after `timeoutMs` whatever its state.
 *
 * @returns true when connected.
 */
export function waitReady(client: Redis | Cluster, timeoutMs: number): Promise<boolean> {
  if (client.status === 'ready') return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(timer);
      client.off('ready', onReady);
      resolve(ok);
    };
    const onReady = () => done(true);
    const timer = setTimeout(() => done(client.status === 'ready'), timeoutMs);
    client.once('ready', onReady);
  });
}

/** Redacts the password of a Valkey URL for logs (`redis://alice:***@host:6379`). */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return '<invalid url>';
  }
}
