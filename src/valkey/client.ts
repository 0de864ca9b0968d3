import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { type Cluster, Redis, type RedisOptions } from 'ioredis';
import { ConfigError } from '../errors.js';
import {
  type ClusterSettings,
  createClusterClient,
  reconnectBackoff,
  type SentinelSettings,
  sentinelOptions,
} from './topology.js';

/** TLS settings of a `rediss://` connection; ignored with a `redis://` URL. */
export interface ValkeyTlsOptions {
  /**
   * PEM file of the CA certificate(s) that signed the server's certificate.
   * When set, these CAs are trusted *instead of* Node's built-in roots.
   * Default: Node's built-in roots.
   */
  caFile?: string;
  /** Refuse a server whose certificate does not verify. Default true; false is for experiments only. */
  rejectUnauthorized?: boolean;
  /** The name sent as SNI and checked against the server's certificate. Default: the URL's host. */
  servername?: string;
}

/**
 * How the store reaches Valkey: one server (`url`), a cluster (`cluster`) or
 * a Sentinel-managed primary (`sentinel`); with more than one, `cluster` wins,
 * then `sentinel`. All durations are milliseconds.
 */
export interface ValkeyOptions {
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
  /** TLS settings; used only when `url` is `rediss://`. */
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
 * given. A refused password or certificate is not thrown: the client keeps
 * retrying (the store runs degraded meanwhile). The client and its
 * `duplicate()`s never expose the password in the errors they emit.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `valkey.tls.caFile` when that file cannot be read or holds no PEM certificate.
 */
export function createValkeyClient(options: ValkeyOptions): Redis | Cluster {
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
  };
  if (options.cluster !== undefined) return createClusterClient(options.cluster, redisOptions);
  if (options.sentinel !== undefined) {
    return new ValkeyClient({ ...redisOptions, ...sentinelOptions(options.sentinel) });
  }
  const url = options.url ?? 'redis://127.0.0.1:6379';
  // ioredis turns TLS on for a rediss:// URL with `tls: true` only when no `tls`
  // is given; an object keeps it on and adds our settings. Given for every
  // rediss:// URL (ioredis's own test is case-sensitive) so TLS is never dropped.
  if (usesTls(url)) redisOptions.tls = tlsOptions(options.tls ?? {});
  return new ValkeyClient(url, redisOptions);
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

function tlsOptions(tls: ValkeyTlsOptions): ConnectionOptions {
  return {
    rejectUnauthorized: tls.rejectUnauthorized ?? true,
    ...(tls.caFile === undefined ? {} : { ca: readCaFile(tls.caFile) }),
    ...(tls.servername === undefined ? {} : { servername: tls.servername }),
  };
}

/**
 * Reads a PEM file of CA certificates (Node ignores a `ca` that is not PEM,
 * which would only show later as a refused handshake).
 *
 * @returns the file's text.
 * @throws {ConfigError} `ECC_BAD_CONFIG`, message starting `valkey.tls.caFile:`, when the file cannot be read or holds no PEM certificate.
 */
export function readCaFile(file: string): string {
  let pem: string;
  try {
    pem = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`valkey.tls.caFile: cannot read the file: ${(err as Error).message}`, {
      cause: err,
    });
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) {
    throw new ConfigError(`valkey.tls.caFile: ${file} holds no PEM certificate`);
  }
  return pem;
}

/**
 * An ioredis client whose emitted errors carry no credentials: ioredis puts a
 * failed command's arguments on its reply error (`err.command.args`), and for
 * AUTH those are the user and the password, which a logger would print.
 * `duplicate()` (the store's subscriber connection) returns one too.
 */
class ValkeyClient extends Redis {
  override duplicate(override?: Partial<RedisOptions>): Redis {
    return new ValkeyClient({ ...this.options, ...override });
  }

  // ioredis rejects the commands it flushes with the same error object
  // synchronously before emitting it, so their handlers (run later) see it redacted too.
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'error') redactAuthArgs(args[0]);
    return super.emit(event, ...args);
  }
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
