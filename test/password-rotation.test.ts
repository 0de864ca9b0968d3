/**
 * Rotating the service's password without a restart, the way managed
 * services do it: the ACL user is given the new password beside the old one,
 * the mounted secret file is replaced, then the old password is removed.
 * The store reads `valkey.passwordFile` again whenever a connection is
 * (re)established, so connections opened after the swap (here forced with
 * `CLIENT KILL USER`, twice: while both passwords are valid and once only the
 * new one is) authenticate with the new password; under a steady read load,
 * no request fails, and no node records a refused AUTH (`ACL LOG`).
 */
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { spawnCluster } from '../harness/cluster.js';
import {
  aclServerArgs,
  adminConnection,
  makeSecure,
  type Secure,
  serviceTls,
  tlsServerArgs,
} from '../harness/secure.js';
import { ask, spawnValkey, type ValkeyServer } from '../harness/valkey-server.js';
import type { Store } from '../src/index.js';
import type { ValkeyOptions } from '../src/valkey/client.js';
import { openStore } from './helpers/probe.js';
import { countingLoader, uniqueTable } from './helpers/store.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'echostore-rotation-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A data topology to rotate on: its nodes (as the admin), its secrets, the store's section, and a stop. */
interface Topology {
  nodes: ValkeyServer[];
  secure: Secure;
  valkey: Omit<ValkeyOptions, 'password' | 'passwordFile'>;
  stop(): Promise<void>;
}

async function singleServer(): Promise<Topology> {
  const secure = makeSecure(mkdtempSync(join(dir, 'single-')));
  const port = await spawnPort();
  const server = await spawnValkey({
    port,
    args: [...tlsServerArgs(secure, port), ...aclServerArgs(secure)],
    connection: adminConnection(secure),
  });
  return {
    nodes: [server],
    secure,
    valkey: {
      url: `rediss://127.0.0.1:${port}`,
      tls: serviceTls(secure),
      username: secure.username,
    },
    stop: () => server.stop(),
  };
}

async function cluster(): Promise<Topology> {
  const local = await spawnCluster({ secure: true });
  const { password: _, ...valkey } = local.valkey;
  return {
    nodes: local.nodes,
    secure: local.secure as Secure,
    valkey,
    stop: () => local.stop(),
  };
}

/** A port below 32768 (out of the ephemeral range), as the cluster harness picks them. */
async function spawnPort(): Promise<number> {
  const { freeClusterPort } = await import('../harness/free-port.js');
  return freeClusterPort();
}

/** Reads through `store` in `loops` loops until `stop` resolves; counts requests and failures. */
function readLoad(store: Store, table: string, loops: number, stop: Promise<void>) {
  let done = false;
  void stop.then(() => {
    done = true;
  });
  const tally = { requests: 0, failed: 0 };
  const loop = async (n: number) => {
    for (let i = 0; !done; i++) {
      // Hot ids (L1), and cold ones that go to Valkey (L2, lease, fill).
      const id = i % 4 === 0 ? `cold-${n}-${i}` : `hot-${i % 10}`;
      tally.requests++;
      await store
        .table(table)
        .get(id)
        .catch(() => {
          tally.failed++;
        });
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  };
  return { tally, running: Promise.all(Array.from({ length: loops }, (_, n) => loop(n))) };
}

/** Replaces `file` atomically, as a secret volume does (a new file renamed over the old). */
function replaceSecret(file: string, text: string): void {
  writeFileSync(`${file}.new`, text);
  renameSync(`${file}.new`, file);
}

const onEvery = (nodes: ValkeyServer[], ...command: string[]) =>
  Promise.all(nodes.map((n) => ask(n, (r) => r.call(command[0] as string, ...command.slice(1)))));

/** The refused AUTHs every node logged (`ACL LOG` entries of reason `auth`). */
async function refusedAuths(nodes: ValkeyServer[]): Promise<number> {
  const logs = (await onEvery(nodes, 'ACL', 'LOG')) as unknown[][][];
  return logs.flat().filter((entry) => entry[entry.indexOf('reason') + 1] === 'auth').length;
}

/** Connections of `user` on every node, summed. */
async function connectionsOf(nodes: ValkeyServer[], user: string): Promise<number> {
  const lists = (await onEvery(nodes, 'CLIENT', 'LIST')) as string[];
  return lists.reduce(
    (n, l) => n + l.split('\n').filter((c) => c.includes(` user=${user} `)).length,
    0,
  );
}

describe.each([
  ['a single TLS server', singleServer],
  ['a TLS cluster', cluster],
])('password rotation on %s', (_, start) => {
  it('swaps the password file and the server passwords under load: no failed request, no refused AUTH', async () => {
    const topology = await start();
    try {
      const { nodes, secure } = topology;
      const file = join(dir, `secret-${Math.random().toString(36).slice(2)}`);
      writeFileSync(file, `${secure.password}\n`);
      const table = uniqueTable('rotate');
      const source = countingLoader();
      const store = await openStore(
        { [table]: { load: source.load } },
        { valkey: { ...topology.valkey, passwordFile: file, connectTimeoutMs: 1_000 } },
      );
      expect(store.valkeyReady()).toBe(true);
      await onEvery(nodes, 'ACL', 'LOG', 'RESET');
      const connected = await connectionsOf(nodes, secure.username);
      let stopLoad = () => {};
      const load = readLoad(
        store,
        table,
        8,
        new Promise((resolve) => (stopLoad = () => resolve())),
      );
      /** Forces every connection of the service to be opened again, and waits until they are. */
      const reconnectAll = async () => {
        await onEvery(nodes, 'CLIENT', 'KILL', 'USER', secure.username);
        await vi.waitFor(
          async () => {
            expect(store.valkeyReady()).toBe(true);
            expect(store.valkeyHealth().subscriber).toBe('ready');
            expect(await connectionsOf(nodes, secure.username)).toBeGreaterThanOrEqual(connected);
          },
          { timeout: 15_000, interval: 100 },
        );
      };

      const next = 'rotated-0c9d-password';
      await onEvery(nodes, 'ACL', 'SETUSER', secure.username, `>${next}`);
      replaceSecret(file, `${next}\n`);
      await reconnectAll();
      await onEvery(nodes, 'ACL', 'SETUSER', secure.username, `<${secure.password}`);
      await reconnectAll();
      stopLoad();
      await load.running;

      // The load ran through both swaps (its rate depends on the machine; 74 under CI's load).
      expect(load.tally.requests).toBeGreaterThan(20);
      expect(load.tally.failed).toBe(0);
      expect(await refusedAuths(nodes)).toBe(0);
      // Only the new password opens a connection now: the store's do, so it read the file again.
      expect(await connectionsOf(nodes, secure.username)).toBeGreaterThanOrEqual(connected);
    } finally {
      await topology.stop();
    }
  }, 90_000);
});
