/**
 * The L1 hit over HTTP, answered before fastify: a plain `GET` or `HEAD` of an
 * item whose found row L1 holds is written straight to Node's response, with
 * the headers the item route would send (`items.ts` builds them with the same
 * functions). Everything else, and any hit this path does not answer, goes to
 * fastify as before.
 *
 * Why: through fastify, a hit paid on top of what a bare fastify route pays for
 * fastify's per-request work (request and reply objects, hooks, schema checks,
 * the response's `finish` listeners, the async handler's promise), about half
 * as much CPU again; see docs/benchmarks.md, "the L1 hit answered before fastify".
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { MIN_BINLOG_HEADER, MIN_LSN_HEADER, type ReadAfter } from '../changes/read-your-writes.js';
import { entityTagOf } from '../store/answers.js';
import type { Store } from '../store/store.js';
import type { Table } from '../store/table.js';
import { cacheStatus, JSON_TYPE, readHeaders } from './items.js';

const TABLES = '/v1/tables/';
const ITEMS = '/items/';

/**
 * Whether `url` from `from` on is an id the router would hand on unchanged:
 * printable ASCII without `%` (an escape), `?` (a query), `#`, `;` or `/`.
 */
function plainId(url: string, from: number): boolean {
  if (from >= url.length) return false;
  for (let i = from; i < url.length; i++) {
    const c = url.charCodeAt(i);
    if (
      c <= 0x20 ||
      c >= 0x7f ||
      c === 0x25 ||
      c === 0x3f ||
      c === 0x23 ||
      c === 0x3b ||
      c === 0x2f
    ) {
      return false;
    }
  }
  return true;
}

/** Options of {@link answerL1Hits}. */
export interface L1HitOptions {
  store: Store;
  /** Read-your-writes of the tables that follow a change stream: such a table's hit carries `Vary`. */
  readAfter: (table: string) => ReadAfter | undefined;
  /** Observes an answered request of the item route: method, status code, seconds. */
  observe: (method: string, statusCode: number, seconds: number) => void;
  log: FastifyBaseLogger;
}

/**
 * Wraps `server`'s request listeners (fastify's) so that a `GET` or `HEAD` of
 * an item that is a found L1 row no purge covers is answered here, in the
 * listener, with the item route's status, headers and body, and counted in
 * `http_request_duration_seconds` under the item route (its time: until the
 * answer is handed to the socket, or, pipelined behind an earlier answer, until it is sent). Handed on to fastify instead: any other
 * method or URL (percent-escapes, queries), `If-None-Match`, read-your-writes
 * headers, an unknown table, a miss, a cached "not found", a row born before a
 * purge. Install it only without tracing and without the access log, which
 * need fastify's request (the store's `traced`, `accessLogSampleRate` > 0).
 */
export function answerL1Hits(server: Server, options: L1HitOptions): void {
  const { readAfter, observe, log } = options;
  const tables = new Map<string, Table>(options.store.tables().map((t) => [t.name, t]));
  const handlers = server.listeners('request') as ((
    request: IncomingMessage,
    response: ServerResponse,
  ) => void)[];
  server.removeAllListeners('request');
  /** True when the request was answered here. */
  const answered = (request: IncomingMessage, response: ServerResponse): boolean => {
    const method = request.method;
    if (method !== 'GET' && method !== 'HEAD') return false;
    const url = request.url ?? '';
    if (!url.startsWith(TABLES)) return false;
    const { headers } = request;
    if (
      headers['if-none-match'] !== undefined ||
      headers[MIN_LSN_HEADER] !== undefined ||
      headers[MIN_BINLOG_HEADER] !== undefined
    ) {
      return false;
    }
    // `/v1/tables/<table>/items/<id>`: a table name with anything odd in it names no table.
    const slash = url.indexOf('/', TABLES.length);
    if (slash < 0 || !url.startsWith(ITEMS, slash) || !plainId(url, slash + ITEMS.length)) {
      return false;
    }
    const name = url.slice(TABLES.length, slash);
    const table = tables.get(name);
    if (table === undefined) return false;
    const startedMs = performance.now();
    const result = table.hit(url.slice(slash + ITEMS.length));
    if (result === undefined) return false;
    const json = result.json;
    // The item route's headers in its order, then the ETag and the body's.
    const out = readHeaders(result, table.policy, cacheStatus(result), readAfter(name), false);
    out.push(
      'etag',
      entityTagOf(result),
      'content-type',
      JSON_TYPE,
      'content-length',
      String(Buffer.byteLength(json)),
    );
    // Without a socket the answer waits behind an earlier one of its connection (pipelined):
    // its time runs until it is sent, as fastify's does. Else it is sent now, and its time ends.
    const queued = response.socket === null;
    response.writeHead(200, out);
    // Node drops the body of a HEAD answer and keeps its Content-Length, as for the item route.
    response.end(json);
    if (queued) {
      response.once('finish', () => observe(method, 200, (performance.now() - startedMs) / 1000));
    } else {
      observe(method, 200, (performance.now() - startedMs) / 1000);
    }
    return true;
  };
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    try {
      if (answered(request, response)) return;
    } catch (err) {
      // A bug here must not take the process down: fastify answers instead, unless the head went out.
      log.error({ err }, 'the L1 hit path failed');
      if (response.headersSent) {
        response.destroy();
        return;
      }
    }
    for (const handler of handlers) handler(request, response);
  });
}
