/**
 * What a local cluster (harness/cluster.ts) and a Sentinel set (harness/sentinel.ts) share: a
 * folder of their own, the TLS and ACL material when `secure`, ports whose bus ports are free
 * too, and a stop that kills every process and removes the folder.
 */
import { rmSync } from 'node:fs';
import { freeClusterPort } from './free-port.js';
import {
  aclServerArgs,
  adminConnection,
  makeSecure,
  type Secure,
  serviceTls,
  tlsServerArgs,
} from './secure.js';
import { privateDir } from './spawn.js';
import { spawnValkey, type ValkeyServer, type ValkeyServerOptions } from './valkey-server.js';

/**
 * Opens a set of server processes in a fresh `prefix…` temporary folder, plain or all secure
 * (`true`: a fresh CA and passwords there). `port()` hands out a {@link freeClusterPort} no other
 * process of the set has; `node(port, args, secureArgs)` spawns a data node with `--dir` and
 * `args` (then TLS, `secureArgs` and the ACL users when secure); `spawn` any other process (a
 * Sentinel); `serviceAuth` is the `valkey` section's TLS files and ACL user; `stop()` SIGKILLs
 * every process spawned (idempotent) and removes the folder.
 */
export function openValkeySet(
  prefix: string,
  secureOption: Secure | boolean | undefined,
  track: ValkeyServerOptions['track'],
) {
  const dir = privateDir(prefix);
  const secure = secureOption === true ? makeSecure(dir) : secureOption || undefined;
  const taken = new Set<number>();
  const spawned: ValkeyServer[] = [];
  const spawn = async (options: ValkeyServerOptions) => {
    const server = await spawnValkey({ track, ...options });
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
