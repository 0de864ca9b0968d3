import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { RedisOptions } from 'ioredis';
import { inject } from 'vitest';
import type { LoadFn } from '../../src/index.js';
import type { ValkeyOptions } from '../../src/valkey/client.js';

/** The shared test server's URL (see `server.ts`); in a cluster run, one node's. */
export function valkeyUrl(): string {
  return inject('valkeyUrl');
}

/** The shared cluster's seed nodes in a cluster run (`npm run test:cluster`), else undefined. */
export function valkeyCluster(): string[] | undefined {
  const seeds = inject('valkeyCluster');
  return seeds.length > 0 ? seeds : undefined;
}

/** What a store of the tests connects to: the shared server's URL, or the shared cluster (over TLS as the service's ACL user when secure). */
export function valkeyTarget(): string | ValkeyOptions {
  const nodes = valkeyCluster();
  if (nodes === undefined) return valkeyUrl();
  const secure = inject('valkeySecure');
  if (secure === null) return { cluster: { nodes } };
  return {
    cluster: { nodes },
    tls: secure.tls,
    username: secure.username,
    password: secure.password,
  };
}

/**
 * The TLS options and admin password of the tests' own connections to a
 * secure cluster (`ECHOSTORE_TEST_CLUSTER=secure`); empty otherwise.
 */
export function adminConnection(): RedisOptions {
  const secure = inject('valkeySecure');
  if (secure === null) return {};
  const read = (file: string) => readFileSync(file, 'utf8');
  const { caFile, certFile, keyFile } = secure.tls;
  return {
    tls: { ca: read(caFile), cert: read(certFile), key: read(keyFile) },
    password: secure.adminPassword,
  };
}

/** A table name no other test uses, so test files can run in parallel on one server. */
export function uniqueTable(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`.slice(0, 64);
}

/** Resolves after `ms` milliseconds. */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A promise with its resolve/reject exposed, for holding a loader open. */
export function deferred<T>(): {
  promise: Promise<T>;
  resolve(v: T): void;
  reject(e: unknown): void;
} {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** A loader that counts its calls and answers `{ id, n }` (n = its call number) after `ms`. */
export function countingLoader(ms = 0): { load: LoadFn; calls: () => number } {
  let n = 0;
  return {
    load: async (id) => {
      const mine = ++n;
      await delay(ms);
      return { id, n: mine };
    },
    calls: () => n,
  };
}
