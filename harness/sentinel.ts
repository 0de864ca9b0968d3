/**
 * A local Sentinel set owned by a drill or a test: a primary, a replica and 3 Sentinels
 * (`redis-server <conf> --sentinel`) on free loopback ports, with a short
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

/** A running Sentinel set the caller controls (see {@link spawnSentinelSet}). */
export type SentinelSet = Awaited<ReturnType<typeof spawnSentinelSet>>;

/** The name the primary is monitored under. */
const NAME = 'echostore';

/**
 * Starts a primary, its replica and the Sentinels, and waits until every Sentinel knows the
 * replica and the other Sentinels (a few seconds: they meet through hello messages every 2 s).
 *
 * @throws {Error} when a process does not start or the set does not form in time; everything
 *   started is stopped first.
 */
export async function spawnSentinelSet(options: ValkeySetOptions = {}) {
  const set = openValkeySet('echostore-sentinel-', options);
  const { dir, secure } = set;
  try {
    const primary = await set.node(await set.port(), []);
    const replicaOf = ['--replicaof', '127.0.0.1', String(primary.port)];
    const replica = await set.node(await set.port(), replicaOf);
    const sentinels: ValkeyServer[] = [];
    for (let i = 0; i < 3; i++) {
      const file = join(dir, `sentinel-${i}.conf`);
      const port = await set.port();
      const lines = [
        `sentinel monitor ${NAME} 127.0.0.1 ${primary.port} 2`,
        `sentinel down-after-milliseconds ${NAME} 1000`,
        `sentinel failover-timeout ${NAME} 5000`,
        `sentinel parallel-syncs ${NAME} 1`,
        ...(secure === undefined ? [] : secureSentinelLines(secure, port)),
      ];
      writeFileSync(file, `${lines.join('\n')}\n`);
      const sentinel = await set.spawn({
        port,
        configFile: file,
        args: ['--dir', dir, '--sentinel', ...(secure === undefined ? [] : ['--port', '0'])],
        connection: secure && { tls: clientTls(secure), password: secure.sentinelPassword },
      });
      sentinels.push(sentinel);
    }
    const addresses = sentinels.map((s) => `127.0.0.1:${s.port}`);
    const primaryNow = () => currentPrimary([primary, replica], sentinels);
    await formed(replica, sentinels);
    const auth =
      secure === undefined ? {} : { username: secure.username, password: secure.sentinelPassword };
    const valkey: ValkeyOptions = {
      sentinel: { sentinels: addresses, name: NAME, ...auth },
      ...set.serviceAuth,
    };
    /**
     * `name` is monitored (`valkey.sentinel.name`); `addresses`, every Sentinel's `host:port`;
     * `valkey`, the service's `valkey` section (the Sentinels and name, and with `secure` TLS and
     * both users); `primary()`, the data node the Sentinels name as primary now; `stop`, SIGKILLs
     * every process (idempotent) and removes the Sentinels' files.
     */
    return {
      ...{ name: NAME, addresses, valkey, stop: set.stop },
      primary: primaryNow,
      /** Resolves with the new primary once the Sentinels name one other than `old` (a failover). */
      async waitFailover(old: ValkeyServer, timeoutMs = 30_000): Promise<ValkeyServer> {
        let now: ValkeyServer | undefined;
        const promoted = async () => {
          now = await primaryNow();
          const role = now === undefined || now === old ? [] : await ask(now, (r) => r.role());
          return role[0] === 'master' || '';
        };
        await settle(timeoutMs, 100, promoted, () => `no failover within ${timeoutMs} ms`);
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
function secureSentinelLines(secure: Secure, port: number): string[] {
  const { pki } = secure;
  const rights = '-@all +sentinel|get-master-addr-by-name +sentinel|sentinels +ping';
  return [
    ...[`tls-port ${port}`, `tls-cert-file ${pki.cert}`, `tls-key-file ${pki.key}`],
    ...[`tls-ca-cert-file ${pki.ca}`, 'tls-auth-clients yes', 'tls-replication yes'],
    `sentinel auth-pass ${NAME} ${secure.adminPassword}`,
    `requirepass ${secure.sentinelPassword}`,
    `user ${secure.username} on >${secure.sentinelPassword} ${rights}`,
  ];
}

/** The server the first live Sentinel that answers names as the primary. */
async function currentPrimary(servers: ValkeyServer[], sentinels: ValkeyServer[]) {
  for (const sentinel of sentinels.filter((s) => running(s.process))) {
    const reply = await ask(
      sentinel,
      (r) =>
        r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', NAME) as Promise<[string, string] | null>,
    ).catch(() => undefined); // ask the next Sentinel
    if (reply) return servers.find((s) => s.port === Number(reply[1]));
  }
  return undefined;
}

/** Every Sentinel sees the replica and the other two Sentinels, and the replica is in sync. */
function formed(replica: ValkeyServer, sentinels: ValkeyServer[]): Promise<void> {
  return settle(
    30_000,
    200,
    async () => {
      const views = await Promise.all(
        sentinels.map((s) =>
          ask(s, (r) => r.call('SENTINEL', 'MASTER', NAME) as Promise<string[]>),
        ),
      );
      const field = (view: string[], key: string) => Number(view[view.indexOf(key) + 1]);
      const seen = views.map((v) => [field(v, 'num-slaves'), field(v, 'num-other-sentinels')]);
      const sync = await ask(replica, (r) => r.info('replication'));
      return (
        (seen.every(([r = 0, s = 0]) => r >= 1 && s >= 2) && /master_link_status:up/.test(sync)) ||
        seen.map(([r, s]) => `${r} replicas/${s} sentinels`).join(', ')
      );
    },
    (last) => `the Sentinel set did not form: ${last}`,
  );
}
