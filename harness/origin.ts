/**
 * A slow HTTP origin for drills: the source of truth, which counts its own reads. Drills judge
 * the laws by these counts, never by the cache's counters.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter, once, setMaxListeners } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** One source read, as the origin saw it. Times are epoch ms (`Date.now()`), comparable across processes. */
export interface StampedRead {
  /** This id's read count at this read (1 = the first); the answer carries it as `read`. */
  n: number;
  arrivedAtMs: number;
  /** When the answer was written; undefined if the client went away first. */
  answeredAtMs: number | undefined;
}

/** An answer other than the item (see `Origin.answerWith`). */
export interface OriginAnswer {
  status: number;
  headers?: Record<string, string>;
}

/** Ids with this prefix are held open until `Origin.release` (or `maxHoldMs`). */
export const HOLD_PREFIX = 'hold-';

/** What an origin adds to its answers. */
export interface OriginOptions {
  /** Sent as `origin` in every answer, so two origins' answers can be told apart. */
  label?: string;
  /** The `Surrogate-Key` header (purge tags) of an id's answers; none when undefined. */
  surrogateKey?: (id: string) => string | undefined;
}

/** A running origin (see {@link startOrigin}). */
export type Origin = Awaited<ReturnType<typeof startOrigin>>;

/**
 * Starts an origin on 127.0.0.1 that answers `GET /items/<id>` after `latencyMs` with
 * `{ id, read, nonce }`: `read` is this id's read count and `nonce` is fresh per read, so two
 * source reads can never look like one answer. A read of an id starting {@link HOLD_PREFIX} is
 * held until released, never longer than `maxHoldMs`; a held read whose client went away is
 * still counted: it was a source read. `options` may label the answers and give each id a
 * `Surrogate-Key` (its purge tags).
 */
export async function startOrigin(
  latencyMs: number,
  maxHoldMs = 20_000,
  options: OriginOptions = {},
) {
  const log = new Map<string, StampedRead[]>();
  const released = new Set<string>();
  const held = new Map<string, Array<() => void>>();
  const arrived = new EventEmitter().setMaxListeners(0);
  const closing = new AbortController();
  setMaxListeners(0, closing.signal);
  const overrides = new Map<string, OriginAnswer>();
  const push = <T>(map: Map<string, T[]>, id: string, item: T) =>
    map.set(id, [...(map.get(id) ?? []), item]);
  let [total, inFlight, peak, open, peakOpen] = [0, 0, 0, 0, 0];

  const later = (ms: number, fn: () => void) =>
    sleep(ms, undefined, { signal: closing.signal }).then(fn, () => {});
  const answer = (res: ServerResponse, id: string, read: StampedRead) => {
    inFlight--;
    if (res.destroyed || res.writableEnded) return;
    read.answeredAtMs = Date.now();
    const override = overrides.get(id) ?? overrides.get('*');
    if (override !== undefined) {
      res.writeHead(override.status, override.headers).end();
      return;
    }
    const key = options.surrogateKey?.(id);
    res.writeHead(200, {
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'surrogate-key': key }),
    });
    const label = options.label === undefined ? {} : { origin: options.label };
    res.end(JSON.stringify({ id, read: read.n, nonce: randomUUID(), ...label }));
  };

  const server = createServer((req, res) => {
    const match = /^\/items\/(.+)$/.exec(req.url ?? '');
    if (req.method !== 'GET' || match === null) {
      res.writeHead(404).end();
      return;
    }
    const id = decodeURIComponent(match[1] as string);
    const n = (log.get(id)?.length ?? 0) + 1;
    const read: StampedRead = { n, arrivedAtMs: Date.now(), answeredAtMs: undefined };
    push(log, id, read);
    total++;
    peak = Math.max(peak, ++inFlight);
    peakOpen = Math.max(peakOpen, ++open);
    res.on('close', () => open--);
    arrived.emit(`read ${id}`);
    let done = false;
    const go = () => {
      if (done) return;
      done = true;
      later(latencyMs, () => answer(res, id, read));
    };
    if (!id.startsWith(HOLD_PREFIX) || released.has(id)) return go();
    push(held, id, go);
    later(maxHoldMs, go);
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  /**
   * `url` is its base URL, `template` the item URL template for an `http` source; `readsOf(id)`,
   * `totalReads()` and `readsLog(id)` (in arrival order, with times) are what it served or held;
   * `seen(id, ms)` resolves true once a read of `id` has arrived (false after `ms`); `release(id)`
   * answers the held reads of `id` (later ones answer after the usual latency); `setLatency`
   * changes it from now on (a source that slows down, or recovers); `open()` counts requests whose
   * client still waits now (a held read its client gave up on is not one); `peakInFlight()` is the
   * most reads it served at once (since start or `resetPeak()`), `peakOpen()` the most requests
   * whose client waited at once: the concurrency put on it.
   */
  return {
    url,
    template: `${url}/items/{id}`,
    readsOf: (id: string): number => log.get(id)?.length ?? 0,
    totalReads: (): number => total,
    readsLog: (id: string): StampedRead[] => [...(log.get(id) ?? [])],
    seen: async (id: string, timeoutMs: number): Promise<boolean> => {
      if (log.has(id)) return true;
      const signal = AbortSignal.timeout(timeoutMs);
      const arrival = once(arrived, `read ${id}`, { signal });
      return arrival.then(() => true).catch(() => false);
    },
    release(id: string): void {
      released.add(id);
      for (const go of held.get(id) ?? []) go();
      held.delete(id);
    },
    /**
     * From now on, reads of `id` (`'*'`: of every id) are answered `status` with `headers` and an
     * empty body (a 503 with `Retry-After`, a blip of 404s, a failing source), still counted;
     * `undefined` restores the normal answer.
     */
    answerWith(id: string, answer: OriginAnswer | undefined): void {
      if (answer === undefined) overrides.delete(id);
      else overrides.set(id, answer);
    },
    setLatency(ms: number): void {
      latencyMs = ms;
    },
    open: (): number => open,
    peakInFlight: (): number => peak,
    peakOpen: (): number => peakOpen,
    resetPeak(): void {
      peak = inFlight;
    },
    close: async (): Promise<void> => {
      closing.abort();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Runs `body` on an origin started by {@link startOrigin} with `args`, and closes it after, however it ends. */
export async function withOrigin<T>(
  args: Parameters<typeof startOrigin>,
  body: (origin: Origin) => Promise<T>,
): Promise<T> {
  const origin = await startOrigin(...args);
  try {
    return await body(origin);
  } finally {
    await origin.close();
  }
}
