/**
 * A Valkey/Redis server owned by a drill: spawned on a free loopback port
 * without persistence, and killed, paused, resumed or restarted (same port,
 * same command line) on purpose.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort } from './service.js';

/** A server process the drill controls. */
export interface ValkeyServer {
  /** `redis://127.0.0.1:<port>`. */
  url: string;
  port: number;
  /** The current process (a restart replaces it). */
  readonly process: ChildProcess;
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
export function serverBinary(): string | undefined {
  for (const bin of ['valkey-server', 'redis-server']) {
    try {
      execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'pipe' });
      return bin;
    } catch {
      // not installed
    }
  }
  return undefined;
}

/**
 * Spawns a server on a free 127.0.0.1 port with `--save '' --appendonly no`
 * and waits until it answers PING.
 *
 * @param track called with every process spawned (the first and each restart),
 *   so the caller can kill them all if it exits early.
 * @throws {Error} when no server binary is installed or it does not answer within `readyTimeoutMs`.
 */
export async function spawnValkey(
  track: (child: ChildProcess) => void,
  readyTimeoutMs = 10_000,
): Promise<ValkeyServer> {
  const binary = serverBinary();
  if (binary === undefined) {
    throw new Error(
      'no valkey-server or redis-server on the PATH (apt-get install -y redis-server)',
    );
  }
  const port = await freePort();
  const argv = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--protected-mode',
    'no',
  ];
  const url = `redis://127.0.0.1:${port}`;
  const launch = async (): Promise<ChildProcess> => {
    const child = spawn(binary, argv, { stdio: 'ignore' });
    track(child);
    await waitForPing(url, readyTimeoutMs, child);
    return child;
  };
  let child = await launch();
  const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;
  const kill = async () => {
    if (exited(child)) return;
    const gone = new Promise((ok) => child.once('exit', ok));
    child.kill('SIGKILL');
    await gone;
  };
  return {
    url,
    port,
    get process() {
      return child;
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

/**
 * Resolves once the server at `url` answers PING, trying every 50 ms.
 *
 * @param child the server process, when this code started it: its exit fails
 *   the wait at once, and it is SIGKILLed when the wait times out.
 * @throws {Error} when it does not answer within `timeoutMs`.
 */
export async function waitForPing(
  url: string,
  timeoutMs: number,
  child?: ChildProcess,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child !== undefined && child.exitCode !== null) {
      throw new Error(`the server at ${url} exited (${child.exitCode})`);
    }
    const client = new Redis(url, {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: 1_000,
    });
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
