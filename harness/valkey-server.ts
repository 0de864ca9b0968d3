/**
 * A Valkey/Redis server process owned by a drill or a test: spawned on a
 * loopback port without persistence, and killed, paused, resumed or restarted
 * (same port, same command line) on purpose. Launchers of several servers
 * (a cluster, sentinels) build on {@link spawnValkey} with their own `args`.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis, type RedisOptions } from 'ioredis';
import { freePort } from './free-port.js';

/** Options of {@link spawnValkey}. */
export interface ValkeyServerOptions {
  /** Arguments after the defaults (`--port`, `--bind 127.0.0.1`, no persistence, protected mode off); later ones win. */
  args?: string[];
  /** Default: a free port. */
  port?: number;
  /** Default: {@link serverBinary}. */
  binary?: string;
  /** A config file, passed before every other argument (a Sentinel needs one it may rewrite). */
  configFile?: string;
  /** Called with every process spawned (the first and each restart), e.g. to kill it if the caller exits early. */
  track?: (child: ChildProcess) => void;
  /** How long each start may take to answer PING, ms. Default 10,000. */
  readyTimeoutMs?: number;
  /**
   * How the harness connects to this server (TLS options, the admin password) when its
   * `args` make it TLS-only or password-protected (see harness/secure.ts). Default: plain, no AUTH.
   */
  connection?: RedisOptions;
}

/** A server process the caller controls. */
export interface ValkeyServer {
  /** `redis://127.0.0.1:<port>` (`rediss://` when `connection` has TLS). */
  url: string;
  port: number;
  /** How the harness connects to it ({@link ValkeyServerOptions.connection}); used by {@link ask}. */
  connection?: RedisOptions;
  /** The current process (a restart replaces it). */
  readonly process: ChildProcess;
  readonly pid: number | undefined;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  /** SIGSTOP: the server keeps its connections but answers nothing. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Starts the same command line again on the same port and waits until it answers PING. */
  restart(): Promise<void>;
  /** SIGKILL if still running (also when paused); idempotent. */
  stop(): Promise<void>;
}

/** The first of `valkey-server`, `redis-server` on the PATH, or undefined. */
export const serverBinary = (): string | undefined =>
  firstOnPath(['valkey-server', 'redis-server']);

/** The first of `bins` that is on the PATH, or undefined. */
export function firstOnPath(bins: string[]): string | undefined {
  return bins.find((bin) => {
    try {
      execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'pipe' });
      return true;
    } catch {
      return false; // not installed
    }
  });
}

/**
 * Spawns a server on 127.0.0.1 with `--save '' --appendonly no` (and
 * `options.args`) and waits until it answers PING.
 *
 * @throws {Error} when no server binary is installed or it does not answer within `readyTimeoutMs`.
 */
export async function spawnValkey(options: ValkeyServerOptions = {}): Promise<ValkeyServer> {
  const binary = options.binary ?? serverBinary();
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
  const url = `${options.connection?.tls === undefined ? 'redis' : 'rediss'}://127.0.0.1:${port}`;
  const launch = async (): Promise<ChildProcess> => {
    const child = spawn(binary, argv, { stdio: 'ignore' });
    options.track?.(child);
    await waitForPing(url, options.readyTimeoutMs ?? 10_000, child, options.connection);
    return child;
  };
  let child = await launch();
  const kill = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((ok) => child.once('exit', ok));
    child.kill('SIGKILL');
    await gone;
  };
  return {
    url,
    port,
    ...(options.connection === undefined ? {} : { connection: options.connection }),
    get process() {
      return child;
    },
    get pid() {
      return child.pid;
    },
    kill,
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    async restart() {
      await kill();
      child = await launch();
    },
    stop: kill,
  };
}

/** True while `server`'s current process runs (it has not exited or been killed). */
export function isRunning(server: ValkeyServer): boolean {
  return server.process.exitCode === null && server.process.signalCode === null;
}

/** A harness connection: connects when asked, 1 s to connect, never reconnects or retries. */
const ONE_SHOT = {
  lazyConnect: true,
  maxRetriesPerRequest: 0,
  retryStrategy: () => null,
  connectTimeout: 1_000,
} as const;

/**
 * Runs `fn` on a short-lived connection of its own to the loopback server on
 * `server.port`: no reconnects or retries and no ready check (commands go as
 * soon as it connects), 1 s to connect, 2 s a command, closed when `fn` settles;
 * over TLS and authenticated when the server has a `connection`.
 *
 * @throws {Error} what connecting or `fn` throws.
 */
export async function ask<T>(
  server: { readonly port: number; readonly connection?: RedisOptions },
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
 * @param child the server process, when the caller started it: its exit fails
 *   the wait at once, and it is SIGKILLed when the wait times out.
 * @param connection TLS options and password for a TLS-only or protected server.
 * @throws {Error} when it does not answer within `timeoutMs`.
 */
export async function waitForPing(
  url: string,
  timeoutMs: number,
  child?: ChildProcess,
  connection: RedisOptions = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child !== undefined && child.exitCode !== null) {
      throw new Error(`the server at ${url} exited (${child.exitCode})`);
    }
    const client = new Redis(url, { ...connection, ...ONE_SHOT });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.ping();
      client.disconnect();
      return;
    } catch (err) {
      client.disconnect();
      if (Date.now() > deadline) {
        child?.kill('SIGKILL');
        throw new Error(`the server at ${url} did not answer PING: ${(err as Error).message}`);
      }
      await sleep(50);
    }
  }
}
