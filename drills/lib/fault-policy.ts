/**
 * What the drills that break Valkey under load (faults, failover, reshard) share: the instances'
 * settings, the longest a request may lawfully take under them, the two instances on one origin
 * they start, how they ask them, and the checks they judge alike.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { startOrigin } from '../../harness/origin.js';
import { type Service, startServices } from '../../harness/service.js';
import { itemUrl, ready, readyWhen, timed } from './http.js';
import { type Check, check, maxMs } from './report.js';
import { originConfig } from './store.js';

/** `valkey.*` of every instance: a paused or dead server costs a command 500 ms at most. */
export const FAULT_VALKEY = { commandTimeoutMs: 500, connectTimeoutMs: 1_000 };

/** The table's policy: L1 keeps the hot ids through the drill; loads, leases and waits bounded. */
export const FAULT_POLICY = {
  ttlMs: 600_000,
  l1: { ttlMs: 600_000 },
  loadTimeoutMs: 2_000,
  leaseMs: 3_000,
  waitTimeoutMs: 4_000,
  maxConcurrentLoads: 64,
  initialConcurrentLoads: 64,
};

/** The longest a request may lawfully take: wait, then load, then one timed-out command, plus 1 s margin. */
const FAULT_BOUND_MS =
  FAULT_POLICY.waitTimeoutMs + FAULT_POLICY.loadTimeoutMs + FAULT_VALKEY.commandTimeoutMs + 1_000;

/** How long the drills' clients wait for an answer: beyond {@link FAULT_BOUND_MS}, so a late one is seen. */
export const REQUEST_TIMEOUT_MS = 10_000;

/** A timed GET of `id` in `table` on the instance at `base`, or with `put` a PUT of that body. */
export const request = (base: string, table: string, id: string, put?: object) =>
  timed(itemUrl(base, table, id), REQUEST_TIMEOUT_MS, put ? 'PUT' : 'GET', put);

/** Two instances of one table on one origin ({@link startFaultPair}). */
export type FaultPair = Awaited<ReturnType<typeof startFaultPair>>;

/**
 * Starts an origin answering after `latencyMs` and two instances of `table` on it (a 3 s grace
 * on a failed start), over `valkey` (a `valkey` section; {@link FAULT_VALKEY} added) with
 * `policy`; they die with the drill. `targets` are their base URLs, `config` the config file
 * both run on; `stop` stops them (SIGKILL after 5 s), then the origin.
 */
export async function startFaultPair(
  valkey: Record<string, unknown>,
  table: string,
  latencyMs: number,
  policy: object = FAULT_POLICY,
) {
  const origin = await startOrigin(latencyMs);
  const config = originConfig({ ...valkey, ...FAULT_VALKEY }, table, origin.template, policy);
  const services = await startServices(2, config, 3_000).catch(async (err: unknown) => {
    await origin.close();
    throw err;
  });
  const stop = async () => {
    await Promise.all(services.map((s) => s.stop(5_000)));
    await origin.close();
  };
  return { origin, services, targets: services.map((s) => s.url), config, stop };
}

/** The law every such drill judges: no request waits past {@link FAULT_BOUND_MS}, nor is `alsoLate`. */
export function boundCheck<S extends { ms: number }>(
  samples: S[],
  why = '',
  alsoLate: (s: S) => boolean = () => false,
): Check {
  const late = samples.filter((s) => s.ms > FAULT_BOUND_MS || alsoLate(s)).length;
  const detail = `${late} late; slowest ${maxMs(samples.map((s) => s.ms))} ms`;
  return check(`no request waits past ${FAULT_BOUND_MS} ms${why}`, late === 0, detail);
}

/** `name`: every one of `samples` answered 200. */
export function all200(name: string, samples: Array<{ status: number }>): Check {
  const bad = samples.filter((s) => s.status !== 200).length;
  return check(name, bad === 0, `${bad} of ${samples.length} not answered 200`);
}

/** `name`: p99 `during` a fault within 2× of its `before` baseline. */
export const p99Check = (name: string, before: number, during: number): Check =>
  check(
    `${name} within 2× of the baseline`,
    during <= 2 * before,
    `${during} ms against ${before} ms (limit ${Math.round(2 * before * 10) / 10} ms)`,
  );

/** `12 ms / <never>`: how long each instance took to say ready. */
const readyText = (ms: Array<number | undefined>, never: string) =>
  ms.map((m) => (m === undefined ? never : `${m} ms`)).join(' / ');

/** How long from now until each instance says ready (polled for up to `withinMs`), as text. */
export async function readyAgain(services: Service[], withinMs: number): Promise<string> {
  const ms = await Promise.all(services.map((s) => readyWhen([s.url], ready, withinMs)));
  return readyText(ms, `not within ${withinMs} ms`);
}

/**
 * The recovery check after fault `phase`, without a restart: every instance's `/readyz` says
 * "ready" within 5 s, then a PUT of a fresh id on the first instance and a GET of it on
 * each round-trip the same value (through Valkey for all but the writer).
 */
export async function recovery(phase: string, services: Service[], table: string) {
  const readyMs = await Promise.all(services.map((s) => readyWhen([s.url], ready)));
  const result = (roundTrip: boolean, detail: string) =>
    check(
      `recovery after phase ${phase}: /readyz ready within 5000 ms and PUT + GET round-trip`,
      readyMs.every((ms) => ms !== undefined) && roundTrip,
      `ready after ${readyText(readyMs, 'never')}; ${detail}`,
    );
  const id = `roundtrip-${randomBytes(6).toString('hex')}`;
  const nonce = randomUUID();
  try {
    const put = await request((services[0] as Service).url, table, id, { nonce });
    if (put.status !== 200) return result(false, `PUT ${put.status} ${put.body}`);
    const gets = await Promise.all(services.map((s) => request(s.url, table, id)));
    const ok = gets.every((g) => g.status === 200 && JSON.parse(g.body).nonce === nonce);
    const detail = `PUT 200, GET ${gets.map((g) => g.status).join('/')}`;
    return result(ok, ok ? detail : `${detail} (wrong value)`);
  } catch (err) {
    return result(false, `PUT/GET failed: ${(err as Error).message}`);
  }
}

/** Ms until `holds` says true (asked every 25 ms), or undefined once `withinMs` has passed. */
export async function until(withinMs: number, holds: () => Promise<boolean>) {
  const started = performance.now();
  while (performance.now() - started < withinMs) {
    if (await holds()) return Math.round(performance.now() - started);
    await sleep(25);
  }
  return undefined;
}
