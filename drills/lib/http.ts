/** Talking to a service instance over HTTP: item URLs, timed requests, readiness, error codes. */
import { setTimeout as sleep } from 'node:timers/promises';
import { inLanes } from './load.js';

/** The item URL of `id` in `table` on the service at `base` (`''`: just the path). */
export const itemUrl = (base: string, table: string, id: string): string =>
  `${base}/v1/tables/${table}/items/${encodeURIComponent(id)}`;

/**
 * The stable code of a failure: the `code` of a thrown error (or of its `cause`, as with
 * `fetch`'s network errors), or `error.code` of an EchoStore JSON error body; else undefined.
 */
export function errorCode(failure: unknown): string | undefined {
  let f = failure as { code?: unknown; cause?: { code?: unknown } } | undefined;
  if (typeof failure === 'string') {
    try {
      f = (JSON.parse(failure) as { error?: typeof f } | null)?.error;
    } catch {
      return undefined;
    }
  }
  if (typeof f?.code === 'string') return f.code;
  return typeof f?.cause?.code === 'string' ? f.cause.code : undefined;
}

/** A request as the client saw it. */
export interface Timed {
  /** HTTP status; 0 when no answer arrived (connection error or client timeout). */
  status: number;
  /** `error.code` of the error body (`NO_CODE` without one); with no answer, `CLIENT_TIMEOUT` or the network error's code. */
  code: string | undefined;
  /** `Cache-Status` said `detail=l1`. */
  l1: boolean;
  /** The `Cache-Status` header, if any. */
  cacheStatus: string | undefined;
  ms: number;
  body: string;
}

/** One timed request (`json`: the body of a PUT or POST, as JSON), bounded by `timeoutMs`; never rejects. */
export async function timed(
  url: string,
  timeoutMs: number,
  method: 'GET' | 'PUT' | 'POST' | 'DELETE' = 'GET',
  json?: unknown,
): Promise<Timed> {
  const started = performance.now();
  const headers = { 'content-type': 'application/json' };
  const init = json === undefined ? { method } : { method, body: JSON.stringify(json), headers };
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    const body = await res.text();
    const cacheStatus = res.headers.get('cache-status') ?? undefined;
    const code = res.ok ? undefined : (errorCode(body) ?? 'NO_CODE');
    const l1 = /detail=l1(;|$)/.test(cacheStatus ?? '');
    return { status: res.status, code, l1, cacheStatus, ms: performance.now() - started, body };
  } catch (err) {
    const e = err as Error;
    const code = e.name === 'TimeoutError' ? 'CLIENT_TIMEOUT' : (errorCode(e) ?? e.name);
    const ms = performance.now() - started;
    return { status: 0, code, l1: false, cacheStatus: undefined, ms, body: '' };
  }
}

/** A GET of an origin's row through a service: {@link Timed}, and what the counting origin stamped on it. */
export interface OriginRead extends Timed {
  id: string;
  /** When it was sent, epoch ms. */
  sentAtMs: number;
  /** The origin's read number the answer carries (0: not a 200). */
  read: number;
  /** The label of the origin that answered (`withOrigin`'s `label`), if any. */
  origin: string | undefined;
}

/** GETs `id` of `table` on the service at `base` (bounded by `timeoutMs`); never rejects. */
export async function readItem(base: string, table: string, id: string, timeoutMs = 10_000) {
  const sentAtMs = Date.now();
  const t = await timed(itemUrl(base, table, id), timeoutMs);
  const body: { read?: number; origin?: string } = t.status === 200 ? JSON.parse(t.body) : {};
  return { ...t, id, sentAtMs, read: body.read ?? 0, origin: body.origin } as OriginRead;
}

/** {@link readItem} of every id of `ids`, `lanes` at a time; the answers in the order they came. */
export async function readItems(base: string, table: string, ids: readonly string[], lanes = 32) {
  const out: OriginRead[] = [];
  await inLanes(lanes, ids, async (id) => out.push(await readItem(base, table, id)));
  return out;
}

/** What `/readyz` says (empty when it does not answer within 1 s). */
export interface Readyz {
  status?: string;
  reason?: string;
  details?: { coherence?: boolean };
}

/** The service's `/readyz` body, or `{}` when it does not answer within 1 s. */
export async function readyz(url: string): Promise<Readyz> {
  try {
    const r = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1_000) });
    return (await r.json()) as Readyz;
  } catch {
    return {};
  }
}

/** `/readyz` says ready. */
export const ready = (r: Readyz): boolean => r.status === 'ready';

/** Ms until the `/readyz` of every one of `urls` satisfies `ok` at once (polled every 25 ms), or undefined after `withinMs`. */
export async function readyWhen(urls: string[], ok: (r: Readyz) => boolean, withinMs = 5_000) {
  const started = performance.now();
  while (performance.now() - started < withinMs) {
    if ((await Promise.all(urls.map(readyz))).every(ok))
      return Math.round(performance.now() - started);
    await sleep(25);
  }
  return undefined;
}
