/**
 * A Valkey/Redis server owned by a drill or a test: spawned on a loopback port without
 * persistence, and killed, paused, resumed or restarted (same port, same command line) on purpose;
 * and the set of them a cluster (harness/cluster.ts) or a Sentinel set (harness/sentinel.ts) is.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { Redis, type RedisOptions } from 'ioredis';
import { freeClusterPort, freePort } from './free-port.js';
import { aclServerArgs, adminConnection, makeSecure, serviceTls, tlsServerArgs } from './secure.js';
import { firstOnPath, privateDir, settle, spawned, stopChild } from './spawn.js';

/** Options of {@link spawnValkey}. */
export interface ValkeyServerOptions {
  /** Arguments after the defaults (`--port`, `--bind 127.0.0.1`, no persistence, protected mode off); later ones win. */
  args?: string[];
  /** Default: a free port. */
  port?: number;
  /** A config file, passed before every other argument (a Sentinel needs one it may rewrite). */
  configFile?: string;
  /** TLS options and the admin password, when `args` make it TLS-only or protected (harness/secure.ts). */
  connection?: RedisOptions;
}

/** A server process the caller controls (see {@link spawnValkey}). */
export type ValkeyServer = Awaited<ReturnType<typeof spawnValkey>>;

/** The first of `valkey-server`, `redis-server` on the PATH, or undefined. */
export const serverBinary = (): string | undefined =>
  firstOnPath(['valkey-server', 'redis-server']);

/**
 * Spawns a server on 127.0.0.1 with `--save '' --appendonly no`, a `--dir` of its own (a replica
 * writes the primary's snapshot there, not into the caller's folder; removed by `stop`) and
 * `options.args`, and waits until it answers PING.
 *
 * @throws {Error} when no server binary is installed or it does not answer within 10 s.
 */
export async function spawnValkey(options: ValkeyServerOptions = {}) {
  const binary = serverBinary();
  const hint = 'no valkey-server or redis-server on the PATH (apt-get install -y redis-server)';
  if (binary === undefined) throw new Error(hint);
  const port = options.port ?? (await freePort());
  const dir = privateDir('echostore-valkey-');
  const argv = [
    ...(options.configFile === undefined ? [] : [options.configFile]),
    ...['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    ...['--dir', dir, '--protected-mode', 'no', ...(options.args ?? [])],
  ];
  const { connection } = options;
  const url = `${connection?.tls === undefined ? 'redis' : 'rediss'}://127.0.0.1:${port}`;
  const launch = async () => {
    const started = spawned(spawn(binary, argv, { stdio: 'ignore' }));
    await waitForPing(url, 10_000, connection, started);
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
    /** SIGKILL if still running (also when paused), then removes its `--dir`; idempotent. */
    async stop(): Promise<void> {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Runs `fn` on a short-lived connection of its own to `server.url`: no reconnects or retries and
 * no ready check, 1 s to connect, 2 s a command, closed when `fn` settles; over TLS and
 * authenticated when the server has a `connection`.
 *
 * @throws {Error} what connecting or `fn` throws.
 */
export async function ask<T>(
  server: { readonly url: string; readonly connection?: RedisOptions | undefined },
  fn: (r: Redis) => Promise<T>,
): Promise<T> {
  const r = new Redis(server.url, {
    ...server.connection,
    ...{ lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 1_000 },
    ...{ commandTimeout: 2_000, enableReadyCheck: false, retryStrategy: () => null },
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
 * Resolves once the server at `url` answers PING, trying every 50 ms; with `child` (the server
 * starting), its exit fails the wait at once.
 *
 * @throws {Error} when it does not answer within `timeoutMs`.
 */
export function waitForPing(
  url: string,
  timeoutMs: number,
  connection?: RedisOptions,
  child?: ChildProcess,
): Promise<void> {
  const ping = () => ask({ url, connection }, (r) => r.ping()).then(() => true as const);
  const fail = (last: string) => `the server at ${url} did not answer PING: ${last}`;
  return settle(timeoutMs, 50, ping, fail, child);
}

/** What a cluster's or a Sentinel set's options share. */
export interface ValkeySetOptions {
  /** TLS only, an admin password and the service's ACL user, with a fresh CA (harness/secure.ts). */
  secure?: boolean;
}

/**
 * Opens a set of server processes in a fresh `prefix…` temporary folder, plain or all secure
 * (`true`: a fresh CA and passwords there). `port()` hands out a {@link freeClusterPort} no other
 * process of the set has; `node(port, args, secureArgs)` spawns a data node with `--dir` and
 * `args` (then TLS, `secureArgs` and the ACL users when secure); `spawn` any other process (a
 * Sentinel); `serviceAuth` is the `valkey` section's TLS files and ACL user; `stop()` SIGKILLs
 * every process spawned (idempotent) and removes the folder.
 */
export function openValkeySet(prefix: string, options: ValkeySetOptions) {
  const dir = privateDir(prefix);
  const secure = options.secure ? makeSecure(dir) : undefined;
  const taken = new Set<number>();
  const spawned: ValkeyServer[] = [];
  const spawn = async (spawnOptions: ValkeyServerOptions) => {
    const server = await spawnValkey(spawnOptions);
    spawned.push(server);
    return server;
  };
  return {
    dir,
    secure,
    serviceAuth:
      secure === undefined
        ? {}
        : { tls: serviceTls(secure), username: secure.username, password: secure.password },
    async port() {
      const port = await freeClusterPort(taken);
      taken.add(port);
      return port;
    },
    node: (port: number, args: string[], secureArgs: string[] = []) =>
      spawn({
        port,
        args: [
          ...['--dir', dir, ...args],
          ...(secure === undefined
            ? []
            : [...tlsServerArgs(secure, port), ...secureArgs, ...aclServerArgs(secure)]),
        ],
        ...(secure === undefined ? {} : { connection: adminConnection(secure) }),
      }),
    spawn,
    async stop() {
      await Promise.all(spawned.map((s) => s.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
