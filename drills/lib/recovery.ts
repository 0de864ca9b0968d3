/** Whether service instances came back by themselves after a fault: readiness and a write round-trip. */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Service } from '../../harness/service.js';
import { itemUrl, readyWithin, timed } from './http.js';
import type { Check } from './report.js';

/** `12 ms / <never>`: how long each instance took to say ready. */
const readyText = (ms: Array<number | undefined>, never: string) =>
  ms.map((m) => (m === undefined ? never : `${m} ms`)).join(' / ');

/** How long from now until each instance says ready (polled for up to `withinMs`), as text. */
export async function readyAgain(services: Service[], withinMs: number): Promise<string> {
  const ms = await Promise.all(services.map((s) => readyWithin(s.url, withinMs)));
  return readyText(ms, `not within ${withinMs} ms`);
}

/**
 * The recovery check after fault `phase`, without a restart: every instance's
 * `/readyz` says "ready" within `withinMs`, then a PUT of a fresh id on the
 * first instance and a GET of it on each round-trip the same value (through
 * Valkey for all but the writer).
 */
export async function recovery(
  phase: string,
  services: Service[],
  table: string,
  withinMs: number,
  requestTimeoutMs: number,
): Promise<Check> {
  const readyMs = await Promise.all(services.map((s) => readyWithin(s.url, withinMs)));
  const check = (roundTrip: boolean, detail: string): Check => ({
    name: `recovery after phase ${phase}: /readyz ready within ${withinMs} ms and PUT + GET round-trip`,
    pass: readyMs.every((ms) => ms !== undefined) && roundTrip,
    detail: `ready after ${readyText(readyMs, 'never')}; ${detail}`,
  });
  const id = `roundtrip-${randomBytes(6).toString('hex')}`;
  const nonce = randomUUID();
  const [first] = services as [Service];
  try {
    const put = await timed(itemUrl(first.url, table, id), requestTimeoutMs, 'PUT', { nonce });
    if (put.status !== 200) return check(false, `PUT ${put.status} ${put.body}`);
    const gets = await Promise.all(
      services.map((s) => timed(itemUrl(s.url, table, id), requestTimeoutMs)),
    );
    const ok = gets.every((g) => g.status === 200 && JSON.parse(g.body).nonce === nonce);
    const detail = `PUT 200, GET ${gets.map((g) => g.status).join('/')}`;
    return check(ok, ok ? detail : `${detail} (wrong value)`);
  } catch (err) {
    return check(false, `PUT/GET failed: ${(err as Error).message}`);
  }
}
