/**
 * A variant of the drill origin (`startOrigin` in `origin.ts`) that can hold a read
 * open: reads of ids starting `hold-` wait, without an answer, until the drill
 * releases that id. A fault drill uses it to keep a lease holder mid-load
 * while it kills the holder.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Origin } from './origin.js';

/** A running holding origin. */
export interface HoldingOrigin extends Origin {
  /** Resolves true once a read of `id` has arrived (counted), false after `timeoutMs`. */
  seen(id: string, timeoutMs: number): Promise<boolean>;
  /** When each read of `id` arrived, `performance.now()` ms, in order. */
  arrivalsOf(id: string): number[];
  /** Answers the held reads of `id`; later reads of it answer after the usual latency. */
  release(id: string): void;
}

/** Ids with this prefix are held until released. */
export const HOLD_PREFIX = 'hold-';

/**
 * Starts an origin on 127.0.0.1 answering `GET /items/<id>` after `latencyMs`
 * with `{ id, read, nonce }`, like `startOrigin`; a read of an id
 * starting {@link HOLD_PREFIX} is held until {@link HoldingOrigin.release}, and
 * never longer than `maxHoldMs` (so nothing outlives a drill that forgot it).
 * A held read whose client went away is still counted: it was a source read.
 */
export async function startHoldingOrigin(
  latencyMs: number,
  maxHoldMs = 20_000,
): Promise<HoldingOrigin> {
  const reads = new Map<string, number>();
  const arrivedAt = new Map<string, number[]>();
  const released = new Set<string>();
  const held = new Map<string, Array<() => void>>();
  const arrivals = new Map<string, Array<() => void>>();
  const timers = new Set<NodeJS.Timeout>();
  let total = 0;

  const answer = (res: ServerResponse, id: string, n: number) => {
    if (res.destroyed || res.writableEnded) return;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id, read: n, nonce: randomUUID() }));
  };
  const later = (ms: number, fn: () => void) => {
    const t = setTimeout(() => {
      timers.delete(t);
      fn();
    }, ms);
    timers.add(t);
  };

  const server = createServer((req, res) => {
    const match = /^\/items\/(.+)$/.exec(req.url ?? '');
    if (req.method !== 'GET' || match === null) {
      res.writeHead(404).end();
      return;
    }
    const id = decodeURIComponent(match[1] as string);
    const n = (reads.get(id) ?? 0) + 1;
    reads.set(id, n);
    arrivedAt.set(id, [...(arrivedAt.get(id) ?? []), performance.now()]);
    total++;
    for (const wake of arrivals.get(id) ?? []) wake();
    arrivals.delete(id);
    if (!id.startsWith(HOLD_PREFIX) || released.has(id)) {
      later(latencyMs, () => answer(res, id, n));
      return;
    }
    let done = false;
    const go = () => {
      if (done) return;
      done = true;
      later(latencyMs, () => answer(res, id, n));
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
    readsOf: (id) => reads.get(id) ?? 0,
    totalReads: () => total,
    arrivalsOf: (id) => [...(arrivedAt.get(id) ?? [])],
    seen(id, timeoutMs) {
      if (reads.has(id)) return Promise.resolve(true);
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
