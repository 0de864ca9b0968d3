/**
 * A slow HTTP origin for drills: the source of truth, which counts its own
 * reads. Drills judge the laws by these counts, never by the cache's counters.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A running origin. */
export interface Origin {
  /** Base URL, e.g. `http://127.0.0.1:40123`. */
  url: string;
  /** The item URL template for an `http` source: `<url>/items/{id}`. */
  template: string;
  /** Reads served, by id. */
  readsOf(id: string): number;
  /** Reads served in all. */
  totalReads(): number;
  close(): Promise<void>;
}

/**
 * Starts an origin on 127.0.0.1 that answers `GET /items/<id>` after
 * `latencyMs` with `{ id, read, nonce }`: `read` is this id's read count and
 * `nonce` is fresh per read, so two source reads can never look like one answer.
 */
export async function startOrigin(latencyMs: number): Promise<Origin> {
  const reads = new Map<string, number>();
  let total = 0;
  const server: Server = createServer((req, res) => {
    const match = /^\/items\/(.+)$/.exec(req.url ?? '');
    if (req.method !== 'GET' || match === null) {
      res.writeHead(404).end();
      return;
    }
    const id = decodeURIComponent(match[1] as string);
    const n = (reads.get(id) ?? 0) + 1;
    reads.set(id, n);
    total++;
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id, read: n, nonce: randomUUID() }));
    }, latencyMs);
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
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
