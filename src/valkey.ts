import { Redis, type RedisOptions } from 'ioredis';

/** How the store reaches Valkey. All durations are milliseconds. */
export interface ValkeyOptions {
  /** `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS. */
  url: string;
  /** A command not answered within this fails (never hangs). Default 1,000. */
  commandTimeoutMs?: number;
  /** A connection attempt not established within this fails and is retried. Default 2,000. */
  connectTimeoutMs?: number;
}

/**
 * Creates an ioredis client set up so that no call can hang on a dead or
 * paused server: every command has `commandTimeout`; there is no offline
 * queue (a command issued while disconnected fails at once, and the store
 * falls back to the source); reconnection retries forever with capped
 * back-off, so the service recovers by itself when Valkey returns.
 */
export function createValkeyClient(options: ValkeyOptions): Redis {
  const redisOptions: RedisOptions = {
    commandTimeout: options.commandTimeoutMs ?? 1_000,
    connectTimeout: options.connectTimeoutMs ?? 2_000,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    // No auto-pipelining: ioredis sends one auto-pipeline per connection at a
    // time, so on a paused server a command could wait for the previous
    // pipeline's timeout before its own started (up to 2 × commandTimeout).
    enableAutoPipelining: false,
    retryStrategy: (attempt) => Math.min(50 * 2 ** Math.min(attempt, 6), 2_000),
    lazyConnect: false,
  };
  return new Redis(options.url, redisOptions);
}

/**
 * Resolves when the client is ready, or after `timeoutMs` whatever its state.
 *
 * @returns true when connected.
 */
export function waitReady(client: Redis, timeoutMs: number): Promise<boolean> {
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

/** Redacts the password of a Valkey URL for logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return '<invalid url>';
  }
}
