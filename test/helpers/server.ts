/**
 * Finds a real Valkey/Redis server for the tests, in this order:
 * 1. `VALKEY_URL`, when set;
 * 2. a `valkey-server` or `redis-server` binary on the PATH, spawned on a free
 *    loopback port without persistence;
 * 3. testcontainers with the `valkey/valkey` image, when a Docker engine answers;
 * else it fails with a message that says what to install.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';

/** A server the tests may use, and how to stop it. */
export interface TestServer {
  url: string;
  /** The spawned process, when this helper started one (for fault tests). */
  process?: ChildProcess;
  port?: number;
  stop(): Promise<void>;
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      srv.close(() =>
        typeof address === 'object' && address
          ? resolve(address.port)
          : reject(new Error('no port')),
      );
    });
  });
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

/** Spawns a server binary on a free port, without persistence, and waits until it answers PING. */
export async function spawnServer(binary = serverBinary()): Promise<TestServer> {
  if (binary === undefined) throw new Error('no valkey-server or redis-server on the PATH');
  const port = await freePort();
  const child = spawn(
    binary,
    [
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
    ],
    { stdio: 'ignore' },
  );
  const url = `redis://127.0.0.1:${port}`;
  await waitForPing(url, 10_000);
  return {
    url,
    port,
    process: child,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
  };
}

async function waitForPing(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new Redis(url, {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.ping();
      client.disconnect();
      return;
    } catch (err) {
      client.disconnect();
      if (Date.now() > deadline)
        throw new Error(`server at ${url} did not answer PING: ${(err as Error).message}`);
      await sleep(50);
    }
  }
}

async function startContainer(): Promise<TestServer> {
  const { GenericContainer } = await import('testcontainers');
  const container = await new GenericContainer('valkey/valkey:8').withExposedPorts(6379).start();
  return {
    url: `redis://${container.getHost()}:${container.getMappedPort(6379)}`,
    async stop() {
      await container.stop();
    },
  };
}

/** Finds or starts the shared test server (see the module comment for the order). */
export async function acquireServer(): Promise<TestServer> {
  const fromEnv = process.env.VALKEY_URL;
  if (fromEnv !== undefined && fromEnv !== '') {
    await waitForPing(fromEnv, 5_000);
    return { url: fromEnv, async stop() {} };
  }
  if (serverBinary() !== undefined) return spawnServer();
  try {
    return await startContainer();
  } catch (err) {
    throw new Error(
      'The tests need a Valkey or Redis server. Set VALKEY_URL=redis://host:port, or install one ' +
        '(apt-get install -y redis-server, or valkey-server), or run a Docker engine for testcontainers. ' +
        `(testcontainers said: ${(err as Error).message})`,
    );
  }
}
