/**
 * What a "production" topology of the harness runs with: TLS only (no plain-text port) with a
 * throwaway CA made by `openssl` at start, client certificates required, an admin password on
 * the `default` user (what the harness, replication and Sentinels use), and an ACL user for the
 * service with only the rights it needs (docs/operations.md#acl-rights).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RedisOptions } from 'ioredis';

/** The credentials and certificates of a secure topology (see {@link makeSecure}). */
export type Secure = ReturnType<typeof makeSecure>;

/**
 * The service user's rights: its keys and channels, the commands of its scripts and subscriber,
 * and what ioredis asks on connecting (`INFO` for the ready check; on a cluster `CLUSTER SLOTS`,
 * `CLUSTER INFO`, `READONLY` on replica connections).
 */
export const SERVICE_RIGHTS = [
  ...['~ecc:*', '&ecc:events:*', '+@read', '+@write', '+time', '+@scripting', '+@pubsub'],
  ...['+ping', '+info', '+client|setname', '+cluster|slots', '+cluster|info', '+readonly'],
];

/**
 * Makes a CA and two certificates it signed in `dir` (EC P-256, valid one day) and picks random
 * passwords.
 *
 * @throws {Error} when `openssl` fails.
 */
export function makeSecure(dir: string) {
  /** PEM files: the CA; the servers' certificate (SAN IP:127.0.0.1, DNS:localhost, also a client of the cluster bus); the clients'. */
  const pki = {
    ca: join(dir, 'ca.pem'),
    cert: join(dir, 'server.pem'),
    key: join(dir, 'server.key'),
    clientCert: join(dir, 'client.pem'),
    clientKey: join(dir, 'client.key'),
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  const caKey = join(dir, 'ca.key');
  openssl(
    ...['req', '-x509', ...ec, '-keyout', caKey, '-out', pki.ca, '-days', '1'],
    ...['-subj', '/CN=EchoStore harness CA', '-addext', 'basicConstraints=critical,CA:TRUE'],
    ...['-addext', 'keyUsage=critical,keyCertSign,cRLSign'],
  );
  const sign = (name: string, cert: string, key: string, ext: string) => {
    const csr = join(dir, `${name}.csr`);
    const extFile = join(dir, `${name}.ext`);
    openssl('req', '-new', ...ec, '-keyout', key, '-out', csr, '-subj', `/CN=${name}`);
    writeFileSync(extFile, `basicConstraints=CA:FALSE\n${ext}\n`);
    openssl(
      ...['x509', '-req', '-in', csr, '-CA', pki.ca, '-CAkey', caKey, '-CAcreateserial'],
      ...['-days', '1', '-extfile', extFile, '-out', cert],
    );
  };
  const san = 'subjectAltName=IP:127.0.0.1,DNS:localhost';
  sign('server', pki.cert, pki.key, `extendedKeyUsage=serverAuth,clientAuth\n${san}`);
  sign('client', pki.clientCert, pki.clientKey, 'extendedKeyUsage=clientAuth');
  const secret = (what: string) => `${what}-${Math.random().toString(36).slice(2, 12)}`;
  return {
    pki,
    /** The `default` user's password: the harness's own, replication's (`masterauth`) and the Sentinels' (`auth-pass`). */
    adminPassword: secret('admin'),
    /** The service's ACL user on the data nodes. */
    username: 'echostore',
    /** Its password (the user may also be given more with `ACL SETUSER … >another`). */
    password: secret('svc'),
    /** The Sentinels' `requirepass` (clients and the other Sentinels authenticate with it). */
    sentinelPassword: secret('sentinel'),
  };
}

/** `redis-server` arguments: TLS only on `port`, client certificates required, replication over TLS. */
export function tlsServerArgs({ pki }: Secure, port: number): string[] {
  return [
    ...['--port', '0', '--tls-port', String(port), '--tls-replication', 'yes'],
    ...['--tls-cert-file', pki.cert, '--tls-key-file', pki.key, '--tls-ca-cert-file', pki.ca],
    ...['--tls-auth-clients', 'yes'],
  ];
}

/** `redis-server` arguments: the admin password (also replication's) and the service's ACL user. */
export function aclServerArgs(secure: Secure): string[] {
  return [
    ...['--requirepass', secure.adminPassword, '--masterauth', secure.adminPassword],
    ...['--user', secure.username, 'on', `>${secure.password}`, ...SERVICE_RIGHTS],
  ];
}

/** The Node TLS options of a client of these servers (CA, client certificate). */
export function clientTls({ pki }: Secure): NonNullable<RedisOptions['tls']> {
  const read = (file: string) => readFileSync(file, 'utf8');
  return { ca: read(pki.ca), cert: read(pki.clientCert), key: read(pki.clientKey) };
}

/** How the harness itself connects to a data node: TLS, as `default` with the admin password. */
export function adminConnection(secure: Secure): RedisOptions {
  return { tls: clientTls(secure), password: secure.adminPassword };
}

/** The service's `valkey.tls` section for these servers: `{ caFile, certFile, keyFile }`. */
export function serviceTls({ pki }: Secure) {
  return { caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey };
}

/** `redis-cli` arguments to reach these servers as the admin. */
export function cliArgs({ pki, adminPassword }: Secure): string[] {
  return [
    ...['--tls', '--cacert', pki.ca, '--cert', pki.clientCert, '--key', pki.clientKey],
    ...['-a', adminPassword, '--no-auth-warning'],
  ];
}
