/**
 * A slow HTTP origin for drills: the source of truth, which counts its own
 * reads. Drills judge the laws by these counts, never by the cache's counters.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One source read, as the origin saw it. Times are epoch ms (`Date.now()`), comparable across processes. */
export interface StampedRead {
  /** This id's read count at this read (1 = the first); the answer carries it as `read`. */
  n: number;
  arrivedAtMs: number;
  /** When the answer was written; undefined if the client went away first. */
  answeredAtMs: number | undefined;
}

/** An answer other than the item (see {@link Origin.answerWith}). */
export interface OriginAnswer {
  status: number;
  headers?: Record<string, string>;
}

/** Ids with this prefix are held open until {@link Origin.release} (or `maxHoldMs`). */
export const HOLD_PREFIX = 'hold-';

/** What an origin adds to its answers. */
export interface OriginOptions {
  /** Sent as `origin` in every answer, so two origins' answers can be told apart. */
  label?: string;
  /** The `Surrogate-Key` header (purge tags) of an id's answers; none when undefined. */
  surrogateKey?: (id: string) => string | undefined;
}

/** A running origin. */
export interface Origin {
  /** Base URL, e.g. `http://127.0.0.1:40123`. */
  url: string;
  /** The item URL template for an `http` source: `<url>/items/{id}`. */
  template: string;
  /** Reads served (or held), by id. */
  readsOf(id: string): number;
  /** Reads in all. */
  totalReads(): number;
  /** The reads of `id`, in arrival order, with their times. */
  readsLog(id: string): StampedRead[];
  /** Resolves true once a read of `id` has arrived, false after `timeoutMs`. */
  seen(id: string, timeoutMs: number): Promise<boolean>;
  /** Answers the held reads of `id`; later reads of it answer after the usual latency. */
  release(id: string): void;
  /**
   * From now on, reads of `id` are answered `status` with `headers` and an
   * empty body (a 503 with `Retry-After`, a blip of 404s), still counted; `undefined`
   * restores the normal answer.
   */
  answerWith(id: string, answer: OriginAnswer | undefined): void;
  /** Changes the latency of reads from now on (a source that slows down, or recovers). */
  setLatency(ms: number): void;
  /** Reads being served right now (arrived, not yet answered). */
  inFlight(): number;
  /** The most reads it ever served at once (since start, or since `resetPeak`). */
  peakInFlight(): number;
  /** Requests whose client still waits for them now (a held read its client gave up on is not one). */
  open(): number;
  /** The most such requests at once since start: the concurrency the clients put on the origin. */
  peakOpen(): number;
  resetPeak(): void;
  close(): Promise<void>;
}

/**
 * Starts an origin on 127.0.0.1 that answers `GET /items/<id>` after
 * `latencyMs` with `{ id, read, nonce }`: `read` is this id's read count and
 * `nonce` is fresh per read, so two source reads can never look like one
 * answer. A read of an id starting {@link HOLD_PREFIX} is held until released,
 * never longer than `maxHoldMs`; a held read whose client went away is still
 * counted: it was a source read. `options` may label the answers and give
 * each id a `Surrogate-Key` (its purge tags).
 */
export async function startOrigin(
  latencyMs: number,
  maxHoldMs = 20_000,
  options: OriginOptions = {},
): Promise<Origin> {
  const log = new Map<string, StampedRead[]>();
  const released = new Set<string>();
  const held = new Map<string, Array<() => void>>();
  const arrivals = new Map<string, Array<() => void>>();
  const timers = new Set<NodeJS.Timeout>();
  const overrides = new Map<string, OriginAnswer>();
  let total = 0;
  let inFlight = 0;
  let peak = 0;
  let open = 0;
  let peakOpen = 0;

  const later = (ms: number, fn: () => void) => {
    const t = setTimeout(() => {
      timers.delete(t);
      fn();
    }, ms);
    timers.add(t);
  };
  const answer = (res: ServerResponse, id: string, read: StampedRead) => {
    inFlight--;
    if (res.destroyed || res.writableEnded) return;
    read.answeredAtMs = Date.now();
    const override = overrides.get(id);
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
    const reads = log.get(id) ?? [];
    log.set(id, reads);
    const read: StampedRead = {
      n: reads.length + 1,
      arrivedAtMs: Date.now(),
      answeredAtMs: undefined,
    };
    reads.push(read);
    total++;
    inFlight++;
    open++;
    peakOpen = Math.max(peakOpen, open);
    res.on('close', () => {
      open--;
    });
    peak = Math.max(peak, inFlight);
    for (const wake of arrivals.get(id) ?? []) wake();
    arrivals.delete(id);
    if (!id.startsWith(HOLD_PREFIX) || released.has(id)) {
      later(latencyMs, () => answer(res, id, read));
      return;
    }
    let done = false;
    const go = () => {
      if (done) return;
      done = true;
      later(latencyMs, () => answer(res, id, read));
    };
    held.set(id, [...(held.get(id) ?? []), go]);
    later(maxHoldMs, go);
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    template: `${url}/items/{id}`,
    readsOf: (id) => log.get(id)?.length ?? 0,
    totalReads: () => total,
    readsLog: (id) => [...(log.get(id) ?? [])],
    seen(id, timeoutMs) {
      if (log.has(id)) return Promise.resolve(true);
      return new Promise((resolve) => {
        const t = setTimeout(() => resolve(false), timeoutMs);
        arrivals.set(id, [
          ...(arrivals.get(id) ?? []),
          () => {
            clearTimeout(t);
            resolve(true);
          },
        ]);
      });
    },
    answerWith(id, answer) {
      if (answer === undefined) overrides.delete(id);
      else overrides.set(id, answer);
    },
    setLatency(ms) {
      latencyMs = ms;
    },
    inFlight: () => inFlight,
    open: () => open,
    peakOpen: () => peakOpen,
    peakInFlight: () => peak,
    resetPeak() {
      peak = inFlight;
    },
    release(id) {
      released.add(id);
      for (const go of held.get(id) ?? []) go();
      held.delete(id);
    },
    close: () =>
      new Promise((resolve) => {
        for (const t of timers) clearTimeout(t);
        timers.clear();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
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
