/**
 * Finds a real Valkey/Redis server for the tests, in this order:
 * 1. `VALKEY_URL`, when set;
 * 2. a `valkey-server` or `redis-server` binary on the PATH, spawned on a free
 *    loopback port without persistence;
 * 3. testcontainers with the `valkey/valkey` image, when a Docker engine answers;
 * else it fails with a message that says what to install.
 */
import type { ChildProcess } from 'node:child_process';
import { serverBinary, spawnValkey, waitForPing } from '../../harness/valkey-server.js';

/** A server the tests may use, and how to stop it. */
export interface TestServer {
  url: string;
  /** The spawned process, when this helper started one (for fault tests). */
  process?: ChildProcess;
  port?: number;
  stop(): Promise<void>;
}

/**
 * Spawns a server binary on a free port, without persistence, and waits until
 * it answers PING (the harness's `spawnValkey`, shared with the drills; tests
 * that kill or pause a server use its process).
 */
export async function spawnServer(): Promise<TestServer> {
  const server = await spawnValkey();
  return {
    url: server.url,
    port: server.port,
    process: server.process,
    stop: () => server.stop(),
  };
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
