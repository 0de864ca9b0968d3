/**
 * A variant of the drill origin (`startOrigin` in `origin.ts`) that also
 * stamps each read with when it arrived and when it was answered, so a drill
 * can place every source read on the timeline of the values it produced.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Origin } from './origin.js';

/** One source read, as the origin saw it. Times are epoch ms (`Date.now()`), comparable across processes. */
export interface StampedRead {
  /** This id's read count at this read (1 = the first); the answer carries it as `read`. */
  n: number;
  arrivedAtMs: number;
  /** When the answer was written; undefined if the client went away first. */
  answeredAtMs: number | undefined;
}

/** A running stamped origin. */
export interface StampedOrigin extends Origin {
  /** The reads of `id`, in arrival order. */
  readsLog(id: string): StampedRead[];
}

/**
 * Starts an origin on 127.0.0.1 that answers `GET /items/<id>` after
 * `latencyMs` with `{ id, read, nonce }`, like `startOrigin`, and keeps a
 * {@link StampedRead} per read.
 */
export async function startStampedOrigin(latencyMs: number): Promise<StampedOrigin> {
  const log = new Map<string, StampedRead[]>();
  const timers = new Set<NodeJS.Timeout>();
  let total = 0;
  const server: Server = createServer((req, res) => {
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
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (res.destroyed) return;
      read.answeredAtMs = Date.now();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id, read: read.n, nonce: randomUUID() }));
    }, latencyMs);
    timers.add(timer);
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    template: `${url}/items/{id}`,
    readsOf: (id) => log.get(id)?.length ?? 0,
    readsLog: (id) => [...(log.get(id) ?? [])],
    totalReads: () => total,
    close: () =>
      new Promise((resolve) => {
        for (const t of timers) clearTimeout(t);
        timers.clear();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
