/** Runs the real service (`dist/src/main.js`) as child processes for drills that go through the HTTP API. */
import { type ChildProcess, type StdioOptions, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { listeningPort } from './free-port.js';
import { settle, spawned, stopChild } from './spawn.js';

/** A running service instance (see {@link startService}). */
export type Service = Awaited<ReturnType<typeof startService>>;

/** The first of `paths` (relative to this file) that exists. */
const beside = (...paths: string[]) =>
  paths.map((p) => resolve(dirname(fileURLToPath(import.meta.url)), p)).find(existsSync) as string;
/** The built service: beside this file when it runs from dist/, else in dist/ (tests run the TS source). */
const MAIN = beside('../src/main.js', '../dist/src/main.js');
/** The clock-skew preload (plain JavaScript in harness/, whether this file runs from harness/ or dist/harness/). */
export const SKEW_CLOCK = beside('skew-clock.mjs', '../../harness/skew-clock.mjs');

/**
 * How to start one instance beyond its config: extra `node` arguments before the script (e.g.
 * `--import <SKEW_CLOCK>`) and environment (`SKEW_MS`), the port (a restart on the same
 * address; default a free one), the child's stdio (default `['ignore', 'inherit', 'inherit']`).
 */
export interface StartOptions {
  nodeArgs?: string[];
  env?: Record<string, string>;
  readyTimeoutMs?: number;
  port?: number;
  stdio?: StdioOptions;
}

/**
 * Writes `config` (the service's config file shape) to a temporary YAML file and spawns the
 * service on it, on `port`, without waiting: for a start that should fail, to read its exit code
 * and (`stdio`) its stderr. Unless `config` sets `http.shutdownDelayMs`, it is 0: a drill's stop
 * does not wait out the drain delay of a rolling deploy.
 */
export function spawnService(
  config: object,
  port: number,
  options: StartOptions = {},
): ChildProcess {
  const dir = mkdtempSync(join(tmpdir(), 'echostore-drill-'));
  const file = join(dir, 'config.yaml');
  const http = { shutdownDelayMs: 0, ...(config as { http?: object }).http };
  writeFileSync(file, stringify({ ...config, http }));
  // The config file says where Valkey is: an inherited VALKEY_URL or VALKEY_CLUSTER_NODES would override it.
  const { VALKEY_URL: _u, VALKEY_CLUSTER_NODES: _n, ...env } = process.env;
  const argv = [...(options.nodeArgs ?? []), MAIN, '--config', file];
  const local = { PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: env.LOG_LEVEL ?? 'warn' };
  const stdio = options.stdio ?? ['ignore', 'inherit', 'inherit'];
  const child = spawned(
    spawn(process.execPath, argv, { env: { ...env, ...options.env, ...local }, stdio }),
  );
  // The config was read at start-up; the folder goes with the process.
  child.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return child;
}

/**
 * Starts the service ({@link spawnService}) on `port` (default 0: the OS picks one, and the port
 * is learnt from the OS by the child's pid, {@link listeningPort}, so what answers is this
 * process, never another that took a port picked free beforehand) and waits until `/readyz`
 * there answers 200.
 *
 * @throws {Error} when the service exits or is not ready within `readyTimeoutMs`.
 */
export async function startService(config: object, options: StartOptions = {}) {
  const child = spawnService(config, options.port ?? 0, options);
  let url = '';
  const ready = () => {
    const port = listeningPort(child.pid as number);
    if (port === undefined) return Promise.resolve('not listening yet');
    url = `http://127.0.0.1:${port}`;
    return fetch(`${url}/readyz`).then((r) => r.ok || `/readyz answered ${r.status}`);
  };
  const fail = (last: string) => `the service (pid ${child.pid}) was not ready: ${last}`;
  await settle(options.readyTimeoutMs ?? 30_000, 50, ready, fail, child);
  /** `url`: its base URL; `stop`: SIGTERM, and SIGKILL after `graceMs`; resolves on its exit. */
  const stop = (graceMs = 10_000): Promise<void> => stopChild(child, graceMs);
  return { url, process: child, stop };
}

/**
 * Starts `count` services on `config`, or none: a failed start stops those that did start
 * (within `graceMs`) and rethrows.
 */
export function startServices(count: number, config: object, graceMs?: number): Promise<Service[]> {
  const starts = Array.from({ length: count }, () => startService(config));
  return startAll(starts, graceMs);
}

/** {@link startServices} of starts already under way (e.g. on different options): all, or none. */
async function startAll(starts: Array<Promise<Service>>, graceMs?: number): Promise<Service[]> {
  const started = await Promise.allSettled(starts);
  const services = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s) => s.status === 'rejected');
  if (failed === undefined) return services;
  await Promise.all(services.map((s) => s.stop(graceMs)));
  throw failed.reason;
}

/** Runs `body` on the services `starts` start (all, or none, as {@link startServices}) and stops them after it, however it ends. */
export async function withServices<T>(
  starts: Array<Promise<Service>>,
  body: (services: Service[]) => Promise<T>,
): Promise<T> {
  const services = await startAll(starts);
  try {
    return await body(services);
  } finally {
    await Promise.all(services.map((s) => s.stop()));
  }
}
