/** Whether service instances came back by themselves after a fault: readiness and a write round-trip. */
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { itemUrl, timedGet } from './load.js';
import type { Service } from './service.js';
/** What {@link recovery} found. */
export interface Recovery {
  /** Per instance, ms until `/readyz` said ready; undefined when it did not within `withinMs`. */
  readyMs: Array<number | undefined>;
  roundTrip: boolean;
  detail: string;
}

/** Polls `/readyz` until it says "ready"; the ms it took, or undefined after `withinMs`. */
export async function readyWithin(url: string, withinMs: number): Promise<number | undefined> {
  const started = performance.now();
  while (performance.now() - started < withinMs) {
    try {
      const r = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1_000) });
      if (((await r.json()) as { status?: string }).status === 'ready')
        return Math.round(performance.now() - started);
    } catch {
      // not answering: keep polling
    }
    await sleep(100);
  }
  return undefined;
}

/** How long from now until each instance says ready (polled for up to `withinMs`), as text. */
export async function readyAgain(services: Service[], withinMs: number): Promise<string> {
  const ms = await Promise.all(services.map((s) => readyWithin(s.url, withinMs)));
  return ms.map((m) => (m === undefined ? `not within ${withinMs} ms` : `${m} ms`)).join(' / ');
}

/**
 * Recovery after a fault, without a restart: every instance's `/readyz` says
 * "ready" within `withinMs`, then a PUT of a fresh id on the first instance
 * and a GET of it on each round-trip the same value (through Valkey for all
 * but the writer).
 */
export async function recovery(
  services: Service[],
  table: string,
  withinMs: number,
  requestTimeoutMs: number,
): Promise<Recovery> {
  const readyMs = await Promise.all(services.map((s) => readyWithin(s.url, withinMs)));
  const id = `roundtrip-${randomBytes(6).toString('hex')}`;
  const nonce = randomUUID();
  const [first] = services as [Service];
  try {
    const put = await fetch(itemUrl(first.url, table, id), {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ nonce }),
      signal: AbortSignal.timeout(requestTimeoutMs),
    });
    if (put.status !== 200) {
      return { readyMs, roundTrip: false, detail: `PUT ${put.status} ${await put.text()}` };
    }
    const gets = await Promise.all(
      services.map((s) => timedGet(itemUrl(s.url, table, id), requestTimeoutMs)),
    );
    const ok = gets.every((g) => g.status === 200 && JSON.parse(g.body).nonce === nonce);
    const detail = `PUT 200, GET ${gets.map((g) => g.status).join('/')}`;
    return { readyMs, roundTrip: ok, detail: ok ? detail : `${detail} (wrong value)` };
  } catch (err) {
    return { readyMs, roundTrip: false, detail: `PUT/GET failed: ${(err as Error).message}` };
  }
}
