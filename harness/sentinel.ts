/**
 * A local Sentinel set owned by a drill or a test: one primary, `replicas`
 * replicas and `sentinels` Sentinels (`redis-server <conf> --sentinel`) on
 * free loopback ports, with a short `down-after-milliseconds` so that a
 * failover takes seconds; every process is stopped by pid.
 *
 * With `secure` (harness/secure.ts) every process is TLS-only with client
 * certificates required; the data nodes have the admin password (the
 * Sentinels' `auth-pass`, replication's `masterauth`) and the service's ACL
 * user, and the Sentinels a `requirepass` of their own (the other Sentinels
 * use it) and an ACL user for the service with only the rights it needs
 * there; `valkey` is then the service's section for it.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ValkeyOptions } from '../src/valkey/client.js';
import { clientTls, type Secure } from './secure.js';
import { ask, isRunning, type ValkeyServer, type ValkeyServerOptions } from './valkey-server.js';
import { openValkeySet, settle } from './valkey-set.js';

/** Options of {@link spawnSentinelSet}. */
export interface SentinelSetOptions {
  /** Replicas of the primary. Default 1. */
  replicas?: number;
  /** Sentinels (the quorum is a majority of them). Default 3. */
  sentinels?: number;
  /** The name the primary is monitored under. Default `echostore`. */
  name?: string;
  /** `down-after-milliseconds`: how long a silent primary takes to be failed over, ms. Default 1,000. */
  downAfterMs?: number;
  /** Called with every process spawned. */
  track?: ValkeyServerOptions['track'];
  /** How long the set may take to form (every Sentinel sees the replicas and the other Sentinels), ms. Default 30,000. */
  readyTimeoutMs?: number;
  /**
   * TLS only, passwords and the service's ACL user (see harness/secure.ts); `true` makes a
   * fresh CA and passwords in the set's directory. Default (or `false`): plain, no AUTH.
   */
  secure?: Secure | boolean;
}

/** A running Sentinel set the caller controls. */
export interface SentinelSet {
  /** The monitored name (`valkey.sentinel.name`). */
  name: string;
  /** The data nodes: the first primary, then its replicas. */
  servers: ValkeyServer[];
  /** The Sentinels. */
  sentinels: ValkeyServer[];
  /** `host:port` of every Sentinel (`valkey.sentinel.sentinels`). */
  addresses: string[];
  /** The certificates and credentials, when started `secure`. */
  secure: Secure | undefined;
  /** The service's `valkey` section: the Sentinels and name, and with `secure` TLS and both users. */
  valkey: ValkeyOptions;
  /** The data node the Sentinels currently name as primary. */
  primary(): Promise<ValkeyServer | undefined>;
  /** Resolves with the new primary once the Sentinels name one other than `old` (a failover). */
  waitFailover(old: ValkeyServer, timeoutMs?: number): Promise<ValkeyServer>;
  /** SIGKILLs every process (idempotent) and removes the Sentinels' files. */
  stop(): Promise<void>;
}

/**
 * Starts a primary, its replicas and the Sentinels, and waits until every
 * Sentinel knows the replicas and the other Sentinels (a few seconds: they
 * discover each other through hello messages every 2 s).
 *
 * @throws {Error} when a process does not start or the set does not form in time; everything started is stopped first.
 */
export async function spawnSentinelSet(options: SentinelSetOptions = {}): Promise<SentinelSet> {
  const name = options.name ?? 'echostore';
  const replicas = options.replicas ?? 1;
  const count = options.sentinels ?? 3;
  // Each process's port is known before it starts, so its TLS port can be given on the command
  // line; below 32768, out of the kernel's ephemeral range (a client's port cannot take it first).
  const set = openValkeySet('echostore-sentinel-', options.secure, options.track);
  const { dir, secure } = set;
  const servers: ValkeyServer[] = [];
  const sentinels: ValkeyServer[] = [];
  const dataNode = async (args: string[]) => set.node(await set.port(), args);
  try {
    // A replica writes the snapshot it syncs from to its --dir: keep it out of the caller's cwd.
    const primary = await dataNode([]);
    servers.push(primary);
    const started = await Promise.all(
      Array.from({ length: replicas }, () =>
        dataNode(['--replicaof', '127.0.0.1', String(primary.port)]),
      ),
    );
    servers.push(...started);
    const quorum = Math.floor(count / 2) + 1;
    for (let i = 0; i < count; i++) {
      const file = join(dir, `sentinel-${i}.conf`);
      const port = await set.port();
      writeFileSync(
        file,
        [
          `sentinel monitor ${name} 127.0.0.1 ${primary.port} ${quorum}`,
          `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 1_000}`,
          `sentinel failover-timeout ${name} 5000`,
          `sentinel parallel-syncs ${name} 1`,
          ...(secure === undefined ? [] : secureSentinelLines(secure, name, port)),
          '',
        ].join('\n'),
      );
      sentinels.push(
        await set.spawn({
          port,
          configFile: file,
          args: ['--dir', dir, '--sentinel', ...(secure === undefined ? [] : ['--port', '0'])],
          ...(secure === undefined
            ? {}
            : { connection: { tls: clientTls(secure), password: secure.sentinelPassword } }),
        }),
      );
    }
    const addresses = sentinels.map((s) => `127.0.0.1:${s.port}`);
    const sentinelSet: SentinelSet = {
      name,
      servers,
      sentinels,
      addresses,
      secure,
      valkey: {
        sentinel: {
          sentinels: addresses,
          name,
          ...(secure === undefined
            ? {}
            : { username: secure.username, password: secure.sentinelPassword }),
        },
        ...set.serviceAuth,
      },
      primary: () => currentPrimary(sentinelSet),
      async waitFailover(old, timeoutMs = 30_000) {
        let now: ValkeyServer | undefined;
        await settle(
          timeoutMs,
          100,
          async () => {
            now = await currentPrimary(sentinelSet);
            return (now !== undefined && now !== old && (await role(now)) === 'master') || '';
          },
          () => `no failover within ${timeoutMs} ms`,
        );
        return now as ValkeyServer;
      },
      stop: set.stop,
    };
    await formed(sentinelSet, replicas, options.readyTimeoutMs ?? 30_000);
    return sentinelSet;
  } catch (err) {
    await set.stop();
    throw err;
  }
}

/** The service user's rights on a Sentinel: find the primary, and learn the other Sentinels. */
const SENTINEL_RIGHTS = [
  '-@all',
  '+sentinel|get-master-addr-by-name',
  '+sentinel|sentinels',
  '+ping',
];

/**
 * A secure Sentinel's configuration lines: TLS only on `port`, TLS to the
 * data nodes (`tls-replication yes`), the admin password for them
 * (`auth-pass`), and a `requirepass` of its own, which the other Sentinels use too.
 */
function secureSentinelLines(secure: Secure, name: string, port: number): string[] {
  const { pki } = secure;
  return [
    `tls-port ${port}`,
    `tls-cert-file ${pki.cert}`,
    `tls-key-file ${pki.key}`,
    `tls-ca-cert-file ${pki.ca}`,
    'tls-auth-clients yes',
    'tls-replication yes',
    `sentinel auth-pass ${name} ${secure.adminPassword}`,
    `requirepass ${secure.sentinelPassword}`,
    // The service's own user on the Sentinels: what ioredis asks of them, nothing else.
    `user ${secure.username} on >${secure.sentinelPassword} ${SENTINEL_RIGHTS.join(' ')}`,
  ];
}

/** `master` or `slave`, as the node says. */
async function role(s: ValkeyServer): Promise<string | undefined> {
  try {
    const reply = (await ask(s, (r) => r.call('ROLE'))) as unknown[];
    return String(reply[0]);
  } catch {
    return undefined;
  }
}

async function currentPrimary(set: SentinelSet): Promise<ValkeyServer | undefined> {
  for (const sentinel of set.sentinels.filter(isRunning)) {
    try {
      const reply = (await ask(sentinel, (r) =>
        r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', set.name),
      )) as [string, string] | null;
      if (reply !== null) return set.servers.find((s) => s.port === Number(reply[1]));
    } catch {
      // ask the next Sentinel
    }
  }
  return undefined;
}

/** Every Sentinel sees `replicas` replicas and the other Sentinels, and every replica is in sync. */
function formed(set: SentinelSet, replicas: number, timeoutMs: number): Promise<void> {
  return settle(
    timeoutMs,
    200,
    async () => {
      const views = await Promise.all(
        set.sentinels.map((s) =>
          ask(s, (r) => r.call('SENTINEL', 'MASTER', set.name) as Promise<string[]>),
        ),
      );
      const field = (view: string[], key: string) => Number(view[view.indexOf(key) + 1]);
      const synced = await Promise.all(
        set.servers
          .slice(1)
          .map((s) =>
            ask(s, (r) => r.info('replication')).then((i) => /master_link_status:up/.test(i)),
          ),
      );
      const seen = views.every(
        (v) =>
          field(v, 'num-slaves') >= replicas &&
          field(v, 'num-other-sentinels') >= set.sentinels.length - 1,
      );
      return (
        (seen && synced.every(Boolean)) ||
        views
          .map(
            (v) =>
              `${field(v, 'num-slaves')} replicas/${field(v, 'num-other-sentinels')} sentinels`,
          )
          .join(', ')
      );
    },
    (last) => `the Sentinel set did not form: ${last}`,
  );
}
