/**
 * A Valkey/Redis server owned by a drill or a test: spawned on a loopback port without
 * persistence, and killed, paused, resumed or restarted (same port, same command line) on purpose.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { Redis, type RedisOptions } from 'ioredis';
import { freePort } from './free-port.js';
import { firstOnPath, settle, stopChild, waitReady } from './spawn.js';

/** Options of {@link spawnValkey}. */
export interface ValkeyServerOptions {
  /** Arguments after the defaults (`--port`, `--bind 127.0.0.1`, no persistence, protected mode off); later ones win. */
  args?: string[];
  /** Default: a free port. */
  port?: number;
  /** A config file, passed before every other argument (a Sentinel needs one it may rewrite). */
  configFile?: string;
  /** Called with every process spawned (the first and each restart), e.g. to kill it if the caller exits early. */
  track?: ((child: ChildProcess) => void) | undefined;
  /** How long each start may take to answer PING, ms. Default 10,000. */
  readyTimeoutMs?: number;
  /** TLS options and the admin password, when `args` make it TLS-only or protected (harness/secure.ts). */
  connection?: RedisOptions;
}

/** A server process the caller controls (see {@link spawnValkey}). */
export type ValkeyServer = Awaited<ReturnType<typeof spawnValkey>>;

/** The first of `valkey-server`, `redis-server` on the PATH, or undefined. */
export const serverBinary = (): string | undefined =>
  firstOnPath(['valkey-server', 'redis-server']);

/**
 * Spawns a server on 127.0.0.1 with `--save '' --appendonly no` (and `options.args`) and waits
 * until it answers PING.
 *
 * @throws {Error} when no server binary is installed or it does not answer within `readyTimeoutMs`.
 */
export async function spawnValkey(options: ValkeyServerOptions = {}) {
  const binary = serverBinary();
  if (binary === undefined) {
    throw new Error(
      'no valkey-server or redis-server on the PATH (apt-get install -y redis-server)',
    );
  }
  const port = options.port ?? (await freePort());
  const argv = [
    ...(options.configFile === undefined ? [] : [options.configFile]),
    ...['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    ...['--protected-mode', 'no', ...(options.args ?? [])],
  ];
  const { connection } = options;
  const url = `${connection?.tls === undefined ? 'redis' : 'rediss'}://127.0.0.1:${port}`;
  const launch = async () => {
    const started = spawn(binary, argv, { stdio: 'ignore' });
    options.track?.(started);
    const timeoutMs = options.readyTimeoutMs ?? 10_000;
    await waitReady(started, `the server at ${url}`, timeoutMs, () => ping(url, connection));
    return started;
  };
  let child = await launch();
  const kill = () => stopChild(child);
  return {
    /** `redis://127.0.0.1:<port>` (`rediss://` when `connection` has TLS). */
    url,
    port,
    /** How the harness connects to it; used by {@link ask}. */
    connection,
    /** The current process (a restart replaces it). */
    get process(): ChildProcess {
      return child;
    },
    get pid(): number | undefined {
      return child.pid;
    },
    /** SIGKILL, and wait for the exit. */
    kill,
    /** SIGSTOP: the server keeps its connections but answers nothing. */
    pause: () => child.kill('SIGSTOP'),
    /** SIGCONT. */
    resume: () => child.kill('SIGCONT'),
    /** Starts the same command line again on the same port and waits until it answers PING. */
    async restart(): Promise<void> {
      await kill();
      child = await launch();
    },
    /** SIGKILL if still running (also when paused); idempotent. */
    stop: kill,
  };
}

/** A harness connection: connects when asked, 1 s to connect, never reconnects or retries. */
const ONE_SHOT = {
  lazyConnect: true,
  maxRetriesPerRequest: 0,
  retryStrategy: () => null,
  connectTimeout: 1_000,
} as const;

/** PINGs `url` once on a connection of its own: true, or it throws. */
async function ping(url: string, connection: RedisOptions = {}): Promise<true> {
  const client = new Redis(url, { ...connection, ...ONE_SHOT });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.ping();
    return true;
  } finally {
    client.disconnect();
  }
}

/**
 * Runs `fn` on a short-lived connection of its own to the loopback server on `server.port`: no
 * reconnects or retries and no ready check, 1 s to connect, 2 s a command, closed when `fn`
 * settles; over TLS and authenticated when the server has a `connection`.
 *
 * @throws {Error} what connecting or `fn` throws.
 */
export async function ask<T>(
  server: { readonly port: number; readonly connection?: RedisOptions | undefined },
  fn: (r: Redis) => Promise<T>,
): Promise<T> {
  const r = new Redis(server.port, '127.0.0.1', {
    ...server.connection,
    ...ONE_SHOT,
    commandTimeout: 2_000,
    enableReadyCheck: false,
  });
  r.on('error', () => {});
  try {
    await r.connect();
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

/**
 * Resolves once the server at `url` answers PING, trying every 50 ms.
 *
 * @throws {Error} when it does not answer within `timeoutMs`.
 */
export function waitForPing(url: string, timeoutMs: number): Promise<void> {
  return settle(
    timeoutMs,
    50,
    () => ping(url),
    (last) => `the server at ${url} did not answer PING: ${last}`,
  );
}
