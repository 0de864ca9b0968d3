/**
 * A local Sentinel set owned by a drill or a test: one primary, `replicas` replicas and
 * `sentinels` Sentinels (`redis-server <conf> --sentinel`) on free loopback ports, with a short
 * `down-after-milliseconds` so that a failover takes seconds; every process is stopped by pid.
 * With `secure` (harness/secure.ts) every process is TLS-only; the data nodes have the admin
 * password (the Sentinels' `auth-pass`) and the service's ACL user, the Sentinels a `requirepass`
 * of their own and a service user with only the rights it needs there.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ValkeyOptions } from '../src/valkey/client.js';
import { clientTls, type Secure } from './secure.js';
import { running, settle } from './spawn.js';
import { ask, openValkeySet, type ValkeyServer, type ValkeySetOptions } from './valkey-server.js';

/** Options of {@link spawnSentinelSet}. */
export interface SentinelSetOptions extends ValkeySetOptions {
  /** Replicas of the primary. Default 1. */
  replicas?: number;
  /** Sentinels (the quorum is a majority of them). Default 3. */
  sentinels?: number;
  /** The name the primary is monitored under. Default `echostore`. */
  name?: string;
  /** `down-after-milliseconds`: how long a silent primary takes to be failed over, ms. Default 1,000. */
  downAfterMs?: number;
}

/** A running Sentinel set the caller controls (see {@link spawnSentinelSet}). */
export type SentinelSet = Awaited<ReturnType<typeof spawnSentinelSet>>;

/**
 * Starts a primary, its replicas and the Sentinels, and waits until every Sentinel knows the
 * replicas and the other Sentinels (a few seconds: they meet through hello messages every 2 s).
 *
 * @throws {Error} when a process does not start or the set does not form in time; everything
 *   started is stopped first.
 */
export async function spawnSentinelSet(options: SentinelSetOptions = {}) {
  const name = options.name ?? 'echostore';
  const count = options.sentinels ?? 3;
  const set = openValkeySet('echostore-sentinel-', options);
  const { dir, secure } = set;
  const dataNode = async (args: string[]) => set.node(await set.port(), args);
  try {
    const primary = await dataNode([]);
    const servers = [primary];
    const replicaOf = ['--replicaof', '127.0.0.1', String(primary.port)];
    for (let i = 0; i < (options.replicas ?? 1); i++) servers.push(await dataNode(replicaOf));
    const sentinels: ValkeyServer[] = [];
    for (let i = 0; i < count; i++) {
      const file = join(dir, `sentinel-${i}.conf`);
      const port = await set.port();
      const lines = [
        `sentinel monitor ${name} 127.0.0.1 ${primary.port} ${Math.floor(count / 2) + 1}`,
        `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 1_000}`,
        `sentinel failover-timeout ${name} 5000`,
        `sentinel parallel-syncs ${name} 1`,
        ...(secure === undefined ? [] : secureSentinelLines(secure, name, port)),
      ];
      writeFileSync(file, `${lines.join('\n')}\n`);
      const sentinel = await set.spawn({
        port,
        configFile: file,
        args: ['--dir', dir, '--sentinel', ...(secure === undefined ? [] : ['--port', '0'])],
        ...(secure === undefined
          ? {}
          : { connection: { tls: clientTls(secure), password: secure.sentinelPassword } }),
      });
      sentinels.push(sentinel);
    }
    const addresses = sentinels.map((s) => `127.0.0.1:${s.port}`);
    const primaryNow = () => currentPrimary(name, servers, sentinels);
    await formed(name, servers, sentinels, options.readyTimeoutMs ?? 30_000);
    const auth =
      secure === undefined ? {} : { username: secure.username, password: secure.sentinelPassword };
    const valkey: ValkeyOptions = {
      sentinel: { sentinels: addresses, name, ...auth },
      ...set.serviceAuth,
    };
    /**
     * `name` is monitored (`valkey.sentinel.name`); `servers` are the data nodes (the first
     * primary, then its replicas); `addresses`, every Sentinel's `host:port`; `secure`, the
     * certificates and credentials when started so; `valkey`, the service's `valkey` section (the
     * Sentinels and name, and with `secure` TLS and both users); `primary()`, the data node the
     * Sentinels name as primary now; `stop`, SIGKILLs every process (idempotent) and removes the
     * Sentinels' files.
     */
    return {
      ...{ name, servers, sentinels, addresses, secure, valkey, stop: set.stop },
      primary: primaryNow,
      /** Resolves with the new primary once the Sentinels name one other than `old` (a failover). */
      async waitFailover(old: ValkeyServer, timeoutMs = 30_000): Promise<ValkeyServer> {
        let now: ValkeyServer | undefined;
        await settle(
          timeoutMs,
          100,
          async () => {
            now = await primaryNow();
            return (now !== undefined && now !== old && (await role(now)) === 'master') || '';
          },
          () => `no failover within ${timeoutMs} ms`,
        );
        return now as ValkeyServer;
      },
    };
  } catch (err) {
    await set.stop();
    throw err;
  }
}

/**
 * A secure Sentinel's configuration lines: TLS only on `port`, TLS to the data nodes, the admin
 * password for them (`auth-pass`), a `requirepass` of its own (the other Sentinels use it too),
 * and the service's user with only what ioredis asks of a Sentinel.
 */
function secureSentinelLines(secure: Secure, name: string, port: number): string[] {
  const { pki } = secure;
  const rights = '-@all +sentinel|get-master-addr-by-name +sentinel|sentinels +ping';
  return [
    ...[`tls-port ${port}`, `tls-cert-file ${pki.cert}`, `tls-key-file ${pki.key}`],
    ...[`tls-ca-cert-file ${pki.ca}`, 'tls-auth-clients yes', 'tls-replication yes'],
    `sentinel auth-pass ${name} ${secure.adminPassword}`,
    `requirepass ${secure.sentinelPassword}`,
    `user ${secure.username} on >${secure.sentinelPassword} ${rights}`,
  ];
}

/** `master` or `slave`, as the node says; undefined when it does not answer. */
async function role(s: ValkeyServer): Promise<string | undefined> {
  const reply = await ask(s, (r) => r.call('ROLE') as Promise<unknown[]>).catch(() => undefined);
  return reply === undefined ? undefined : String(reply[0]);
}

/** The server the first live Sentinel that answers names as the primary of `name`. */
async function currentPrimary(
  name: string,
  servers: ValkeyServer[],
  sentinels: ValkeyServer[],
): Promise<ValkeyServer | undefined> {
  for (const sentinel of sentinels.filter((s) => running(s.process))) {
    const reply = await ask(
      sentinel,
      (r) =>
        r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name) as Promise<[string, string] | null>,
    ).catch(() => undefined); // ask the next Sentinel
    if (reply) return servers.find((s) => s.port === Number(reply[1]));
  }
  return undefined;
}

/** Every Sentinel sees the replicas and the other Sentinels, and every replica is in sync. */
function formed(
  name: string,
  servers: ValkeyServer[],
  sentinels: ValkeyServer[],
  timeoutMs: number,
): Promise<void> {
  return settle(
    timeoutMs,
    200,
    async () => {
      const views = await Promise.all(
        sentinels.map((s) =>
          ask(s, (r) => r.call('SENTINEL', 'MASTER', name) as Promise<string[]>),
        ),
      );
      const field = (view: string[], key: string) => Number(view[view.indexOf(key) + 1]);
      const seen = views.map((v) => [field(v, 'num-slaves'), field(v, 'num-other-sentinels')]);
      const synced = await Promise.all(
        servers.slice(1).map((s) => ask(s, (r) => r.info('replication'))),
      );
      return (
        (seen.every(([r = 0, s = 0]) => r >= servers.length - 1 && s >= sentinels.length - 1) &&
          synced.every((i) => /master_link_status:up/.test(i))) ||
        seen.map(([r, s]) => `${r} replicas/${s} sentinels`).join(', ')
      );
    },
    (last) => `the Sentinel set did not form: ${last}`,
  );
}
