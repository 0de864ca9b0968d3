/**
 * Credentials and TLS material of the store's Valkey connections: a password
 * given inline or read from a file (a mounted secret) that is read again
 * whenever a connection is (re)established, so an operator rotates it without
 * a restart; and the PEM files of `valkey.tls`.
 *
 * Rotation works the way managed services do it: the server accepts the old
 * and the new password for a while (an ACL user with two passwords, or
 * ElastiCache's `ROTATE` auth-token strategy); the file is replaced; every
 * connection opened from then on authenticates with the new one, and the old
 * connections, already authenticated, go on serving.
 */

import type { ConnectionOptions } from 'node:tls';
import type { Redis, RedisOptions } from 'ioredis';
import {
  MAX_CERT_FILE_BYTES,
  MAX_KEY_FILE_BYTES,
  MAX_SECRET_FILE_BYTES,
  readFileUpTo,
} from '../config/bounded-read.js';
import { ConfigError } from '../errors.js';

/** An ACL user and its password: `password` inline, or `passwordFile`, read on every (re)connect. */
export interface Credentials {
  /** ACL user. Default: `default` (the `requirepass` user). */
  username?: string;
  /** The password, inline. Not with `passwordFile`. */
  password?: string;
  /**
   * A file whose content (trailing newline trimmed) is the password, e.g. a
   * mounted Kubernetes secret; read again on every (re)connect. Not with `password`.
   */
  passwordFile?: string;
}

/** TLS settings of the store's connections. */
export interface ValkeyTlsOptions {
  /**
   * PEM file of the CA certificate(s) that signed the server's certificate.
   * When set, these CAs are trusted *instead of* Node's built-in roots.
   * Default: Node's built-in roots.
   */
  caFile?: string;
  /** PEM file of a client certificate, for a server that asks for one (`tls-auth-clients yes`). With `keyFile`. */
  certFile?: string;
  /** PEM file of the client certificate's private key. With `certFile`. */
  keyFile?: string;
  /** Refuse a server whose certificate does not verify. Default true; false is for experiments only. */
  rejectUnauthorized?: boolean;
  /** The name sent as SNI and checked against the server's certificate. Default: the host connected to. */
  servername?: string;
}

/** Where a password comes from, asked on every (re)connect; undefined when there is none. */
export type PasswordSource = () => string | undefined;

/**
 * The password source of `credentials`. A file is read now, and again on
 * every call; when a later read fails (the file is being replaced), the last
 * password read is kept.
 *
 * @param field the configuration path of `credentials` (`valkey`, `valkey.sentinel`), for errors.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.password` when both `password` and
 *   `passwordFile` are given, `<field>.passwordFile` when the file cannot be read or is empty,
 *   `<field>.username` when a username comes without a password. Never quotes a password.
 */
export function passwordSource(credentials: Credentials, field: string): PasswordSource {
  const { username, password, passwordFile } = credentials;
  if (password !== undefined && passwordFile !== undefined) {
    throw new ConfigError(`${field}.password: cannot be used with ${field}.passwordFile`, {
      field: `${field}.password`,
    });
  }
  if (passwordFile === undefined) {
    if (username !== undefined && password === undefined) {
      throw new ConfigError(`${field}.username: needs ${field}.password or ${field}.passwordFile`, {
        field: `${field}.username`,
      });
    }
    return () => password;
  }
  let last = readSecret(passwordFile, `${field}.passwordFile`);
  return () => {
    try {
      last = readSecret(passwordFile, `${field}.passwordFile`);
    } catch {
      // Mid-replacement (a secret volume swaps a symlink): the last one read stays.
    }
    return last;
  };
}

/**
 * Reads a secret file: its text, trailing CR/LF trimmed.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `field` when it cannot be read or is empty.
 */
function readSecret(file: string, field: string): string {
  let text: string;
  try {
    text = readFileUpTo(file, MAX_SECRET_FILE_BYTES).replace(/[\r\n]+$/, '');
  } catch (err) {
    throw new ConfigError(`${field}: cannot read the file: ${(err as Error).message}`, {
      field,
      cause: err,
    });
  }
  if (text === '') throw new ConfigError(`${field}: ${file} is empty`, { field });
  return text;
}

/**
 * Makes `client` take its password (or, with `key` `sentinelPassword`, its
 * Sentinels' password) from `source` on every (re)connect: ioredis reads
 * `options.password` each time it connects, so a getter there is asked each
 * time. A `duplicate()` copies the value at that moment (ioredis spreads its options).
 */
export function refreshPassword(
  client: Redis | { options: RedisOptions },
  source: PasswordSource,
  key: 'password' | 'sentinelPassword' = 'password',
): void {
  passwordFrom(client.options, source, key);
}

/** Makes `options[key]` a getter asking `source` (see {@link refreshPassword}). */
export function passwordFrom(
  options: RedisOptions,
  source: PasswordSource,
  key: 'password' | 'sentinelPassword' = 'password',
): void {
  Object.defineProperty(options, key, { get: source, enumerable: true, configurable: true });
}

/** The password source `options.password` was made a getter of by {@link passwordFrom}, if any. */
export function passwordSourceOf(options: RedisOptions | undefined): PasswordSource | undefined {
  const get =
    options === undefined ? undefined : Object.getOwnPropertyDescriptor(options, 'password')?.get;
  return get === undefined ? undefined : () => get.call(options) as string | undefined;
}

/**
 * The Node TLS options of `tls`: verification on unless turned off, the CA,
 * client certificate and key read from their files.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `valkey.tls.caFile`, `.certFile` or `.keyFile`
 *   when that file cannot be read or holds no PEM block of its kind, or `valkey.tls.keyFile` /
 *   `valkey.tls.certFile` when only one of the two is given.
 */
export function tlsOptions(tls: ValkeyTlsOptions): ConnectionOptions {
  if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
    const [given, missing] =
      tls.certFile === undefined ? ['keyFile', 'certFile'] : ['certFile', 'keyFile'];
    throw new ConfigError(`valkey.tls.${missing}: needed with valkey.tls.${given}`, {
      field: `valkey.tls.${missing}`,
    });
  }
  return {
    rejectUnauthorized: tls.rejectUnauthorized ?? true,
    ...(tls.caFile === undefined ? {} : { ca: readCaFile(tls.caFile) }),
    ...(tls.certFile === undefined
      ? {}
      : { cert: readPem(tls.certFile, 'valkey.tls.certFile', 'CERTIFICATE') }),
    ...(tls.keyFile === undefined
      ? {}
      : { key: readPem(tls.keyFile, 'valkey.tls.keyFile', 'PRIVATE KEY') }),
    ...(tls.servername === undefined ? {} : { servername: tls.servername }),
  };
}

/**
 * Reads a PEM file of CA certificates (Node ignores a `ca` that is not PEM,
 * which would only show later as a refused handshake).
 *
 * @returns the file's text.
 * @throws {ConfigError} `ECC_BAD_CONFIG`, message starting `valkey.tls.caFile:`, when the file cannot be read or holds no PEM certificate.
 */
export function readCaFile(file: string): string {
  return readPem(file, 'valkey.tls.caFile', 'CERTIFICATE');
}

/**
 * Reads a PEM file that must hold a block whose label ends in `label`
 * (`CERTIFICATE`; `PRIVATE KEY` covers `EC PRIVATE KEY` and `RSA PRIVATE KEY`).
 */
function readPem(file: string, field: string, label: string): string {
  let pem: string;
  try {
    pem = readFileUpTo(file, label === 'PRIVATE KEY' ? MAX_KEY_FILE_BYTES : MAX_CERT_FILE_BYTES);
  } catch (err) {
    throw new ConfigError(`${field}: cannot read the file: ${(err as Error).message}`, {
      field,
      cause: err,
    });
  }
  if (!new RegExp(`-----BEGIN [A-Z ]*${label}-----`).test(pem)) {
    throw new ConfigError(`${field}: ${file} holds no PEM ${label.toLowerCase()}`, { field });
  }
  return pem;
}
