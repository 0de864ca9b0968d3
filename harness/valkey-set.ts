/**
 * What a local cluster (harness/cluster.ts) and a Sentinel set
 * (harness/sentinel.ts) share: a directory of their own, the TLS and ACL
 * material when `secure`, ports below 32768 whose bus ports are free too,
 * nodes spawned with their `--dir` and secure arguments, a stop that kills
 * every process and removes the directory, and the wait for the set to settle.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  aclServerArgs,
  adminConnection,
  makeSecure,
  type Secure,
  serviceTls,
  tlsServerArgs,
} from './secure.js';
import { spawnValkey, type ValkeyServer, type ValkeyServerOptions } from './valkey-server.js';

/** Lowest client port handed out: bus ports (+10000) stay below the kernel's ephemeral range (32768). */
const MIN_PORT = 11_000;
const MAX_PORT = 22_700;

/** True when 127.0.0.1:`port` can be listened on right now. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A port in 11000–22699 such that it and its cluster bus port (+10000) were
 * free a moment ago, not among `taken`.
 */
export async function freeClusterPort(taken: ReadonlySet<number> = new Set()): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = MIN_PORT + Math.floor(Math.random() * (MAX_PORT - MIN_PORT));
    if (taken.has(port) || taken.has(port + 10_000) || taken.has(port - 10_000)) continue;
    if ((await portFree(port)) && (await portFree(port + 10_000))) return port;
  }
  throw new Error(`no free port pair (p, p + 10000) in ${MIN_PORT}–${MAX_PORT}`);
}

/**
 * Opens a set of server processes in a fresh `prefix…` temporary directory,
 * plain or all secure (`true`: a fresh CA and passwords there). `port()` hands
 * out a {@link freeClusterPort} no other process of the set has; `node(port,
 * args, secureArgs)` spawns a data node with `--dir` and `args` (then TLS,
 * `secureArgs` and the ACL users when secure); `spawn` any other process (a
 * Sentinel); `serviceAuth` is the `valkey` section's TLS files and ACL user;
 * `stop()` SIGKILLs every process spawned (idempotent) and removes the directory.
 */
export function openValkeySet(
  prefix: string,
  secureOption: Secure | boolean | undefined,
  track: ValkeyServerOptions['track'],
) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const secure = secureOption === true ? makeSecure(dir) : secureOption || undefined;
  const taken = new Set<number>();
  const spawned: ValkeyServer[] = [];
  const spawn = async (options: ValkeyServerOptions) => {
    const server = await spawnValkey({ ...(track === undefined ? {} : { track }), ...options });
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

/**
 * Resolves once `check` returns true, asking every `intervalMs`; any other
 * answer (or what it throws) is the state the timeout reports.
 *
 * @throws {Error} `fail(last state)` once `timeoutMs` has passed.
 */
export async function settle(
  timeoutMs: number,
  intervalMs: number,
  check: () => Promise<true | string>,
  fail: (last: string) => string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let last: true | string;
    try {
      last = await check();
    } catch (err) {
      last = (err as Error).message;
    }
    if (last === true) return;
    if (Date.now() > deadline) throw new Error(fail(last));
    await sleep(intervalMs);
  }
}
