import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { MIN_BINLOG_HEADER, MIN_LSN_HEADER, type ReadAfter } from '../changes/read-your-writes.js';
import { BadRequestError, BadValueError, NotFoundError } from '../errors.js';
import { entityTagOf } from '../store/answers.js';
import type { TablePolicy } from '../store/policy.js';
import type { Store } from '../store/store.js';
import type { ReadResult } from '../store/types.js';
import type { AdminRouteOptions } from './auth.js';
import { cachingHeaders } from './cache-control.js';
import { clip, sendError } from './errors.js';
import { receivedJson } from './json-body.js';
import { allowOnly } from './methods.js';
import {
  ADMIN_ERRORS,
  ADMIN_SECURITY,
  errorResponses,
  header,
  LOAD_FAILED_RETRY_AFTER,
  RETRY_AFTER,
} from './openapi.js';
import { inCallerTrace } from './trace-context.js';

interface ItemParams {
  table: string;
  id: string;
}

const params = {
  type: 'object',
  required: ['table', 'id'],
  properties: {
    table: { type: 'string', description: 'The table name, `[a-z0-9_-]{1,64}`.' },
    id: {
      type: 'string',
      description:
        "The item id, percent-encoded: 1–512 bytes of printable UTF-8, and the table's `idPattern` if it has one.",
    },
  },
} as const;

/** The item routes' path (and their `route` label in the request metrics). */
export const ITEM_PATH = '/v1/tables/:table/items/:id';
/** The `Content-Type` of a found item. */
export const JSON_TYPE = 'application/json; charset=utf-8';
const ITEMS = ['items'];

const CACHE_STATUS = header('RFC 9211: which layer answered (docs/http-api.md, Cache-Status).');
const ETAG = header(
  "A strong entity tag of the value's JSON text (a SHA-256 prefix): equal text, equal tag, in every mode.",
);
const CACHE_CONTROL = header(
  '`max-age=<s>[, stale-while-revalidate=<s>, stale-if-error=<s>]` (RFC 9111, RFC 5861; docs/http-api.md); absent when the table sets `cacheHeaders: false`.',
);
const AGE = header('Estimated seconds since the source gave this answer (RFC 9111 §5.1).');
const READ_HEADERS = {
  etag: ETAG,
  'cache-status': CACHE_STATUS,
  'cache-control': CACHE_CONTROL,
  age: AGE,
};

const readErrors = errorResponses({
  400: ['ECC_BAD_ID'],
  404: ['ECC_NOT_FOUND (with Cache-Status)', 'ECC_UNKNOWN_TABLE'],
  502: ['ECC_LOAD_FAILED', 'ECC_BAD_VALUE'],
  503: ['ECC_SHED (with Retry-After)', 'ECC_CLOSED'],
  504: ['ECC_LOAD_TIMEOUT', 'ECC_WAIT_TIMEOUT'],
});

/** GET and HEAD: the same schema, so HEAD answers exactly GET's headers. */
const readSchema = {
  summary: 'Read an item (cache-aside; HEAD: the same headers, no body)',
  tags: ITEMS,
  params,
  headers: {
    type: 'object',
    properties: {
      'if-none-match': {
        type: 'string',
        description: '`*` or entity tags (compared weakly): a match answers 304.',
      },
      'echostore-min-lsn': {
        type: 'string',
        description:
          'Read-your-writes, on a `postgres` table that follows a change stream: the commit position the answer must be at least as new as (`pg_current_wal_lsn()` after the COMMIT, `X/Y`). `Cache-Status` then ends in `ryw=stream` (the stream had passed it) or `ryw=source` (read from the source); the answer is `Cache-Control: no-store`.',
      },
      'echostore-min-binlog': {
        type: 'string',
        description:
          'Read-your-writes, on a `mysql` table that follows the binlog: `File:Position` as `SHOW MASTER STATUS` prints it after the COMMIT (`binlog.000042:1234`); otherwise as `echostore-min-lsn`.',
      },
    },
  },
  response: {
    // No type: the value is any JSON value, sent as the text the store holds (never re-serialised).
    200: {
      description: 'The value, any JSON value.',
      headers: READ_HEADERS,
    },
    304: {
      description: '`If-None-Match` matched: no body, no Content-Length.',
      type: 'null',
      headers: READ_HEADERS,
    },
    ...readErrors,
    502: { ...readErrors[502], headers: LOAD_FAILED_RETRY_AFTER },
    503: { ...readErrors[503], headers: RETRY_AFTER },
  },
} as const;

/**
 * The item routes: read (cache-aside, single-flight), write-through, invalidate;
 * `OPTIONS` and 405 for the other methods. Table and id checks live in the
 * store, so the HTTP API and library callers get the same codes. `admin`
 * guards the writes (PUT, DELETE).
 */
export function itemRoutes(
  app: FastifyInstance,
  store: Store,
  admin: AdminRouteOptions,
  readAfter: (table: string) => ReadAfter | undefined,
): void {
  const read = async (request: FastifyRequest<{ Params: ItemParams }>, reply: FastifyReply) => {
    const { table, id } = request.params;
    const t = store.table(table);
    const minLsn = request.headers[MIN_LSN_HEADER];
    const minBinlog = request.headers[MIN_BINLOG_HEADER];
    const readYourWrites = minLsn !== undefined || minBinlog !== undefined;
    const ryw = readAfter(table);
    let result: ReadResult;
    let status: string;
    if (!readYourWrites) {
      result = await (store.traced ? inCallerTrace(request.headers, () => t.get(id)) : t.get(id));
      status = cacheStatus(result);
    } else {
      if (ryw === undefined) {
        throw new BadRequestError(
          `${MIN_LSN_HEADER} or ${MIN_BINLOG_HEADER} needs a table that follows a change stream (source.follow); ${table} does not`,
          { table },
        );
      }
      // The header of the table's database: an LSN for Postgres, a binlog position for MySQL.
      const { header } = ryw.format;
      const at = request.headers[header];
      if (at === undefined || (minLsn !== undefined && minBinlog !== undefined)) {
        throw new BadRequestError(`${table} takes its commit position as ${header}`, { table });
      }
      if (typeof at !== 'string') {
        throw new BadRequestError(`${header} given more than once: give one position`, { table });
      }
      const answer = await ryw.read(t, id, ryw.format.parse(at));
      result = answer.result;
      // An extension parameter (RFC 9211 §2.8): how the answer was made at least that new.
      status = `${cacheStatus(result)}; ryw=${answer.via}`;
    }
    const headers = readHeaders(result, t.policy, status, ryw, readYourWrites);
    for (let i = 0; i < headers.length; i += 2) {
      reply.header(headers[i] as string, headers[i + 1]);
    }
    if (!result.found) {
      return sendError(
        request,
        reply,
        new NotFoundError(`no item ${clip(id)} in ${table}`, { table, id }),
      );
    }
    const etag = entityTagOf(result);
    reply.header('etag', etag);
    // RFC 9110 §13.1.2: a matching If-None-Match on a GET or HEAD answers 304 without a body.
    if (noneMatch(request.headers['if-none-match'], etag)) return reply.code(304).send();
    return reply.type(JSON_TYPE).send(result.json);
  };
  // HEAD runs GET's handler and sends GET's answer: Node's HTTP server writes
  // the headers (Content-Length included) and drops the body. fastify's own
  // HEAD route would add `Content-Length: 0` to a 304 (RFC 9110 §8.6: a 304
  // has no body and should not say so).
  app.get<{ Params: ItemParams }>(ITEM_PATH, { schema: readSchema, exposeHeadRoute: false }, read);
  app.head<{ Params: ItemParams }>(ITEM_PATH, { schema: readSchema }, read);

  app.put<{ Params: ItemParams; Body: unknown }>(
    ITEM_PATH,
    {
      schema: {
        summary: 'Store a value in the cache (admin)',
        description:
          'Writes the cache, never the source: Valkey, then this L1, with a new version; the lease is cancelled.',
        tags: ITEMS,
        security: ADMIN_SECURITY,
        params,
        body: { description: 'The value, any JSON value (application/json, UTF-8).' },
        response: {
          200: {
            description: 'Stored, with this version (also as ETag).',
            type: 'object',
            required: ['version'],
            properties: { version: { type: 'integer' } },
            headers: { etag: ETAG },
          },
          ...errorResponses({
            400: ['ECC_BAD_ID', 'ECC_BAD_REQUEST'],
            ...ADMIN_ERRORS,
            404: ['ECC_UNKNOWN_TABLE'],
            413: ['ECC_PAYLOAD_TOO_LARGE'],
            415: ['ECC_UNSUPPORTED_MEDIA_TYPE'],
            503: ['ECC_VALKEY_UNAVAILABLE', 'ECC_CLOSED'],
          }),
        },
      },
      ...admin,
    },
    async (request, reply) => {
      const { table, id } = request.params;
      const t = store.table(table);
      if (request.body === undefined) {
        throw new BadRequestError('a JSON body (application/json) is required', { table, id });
      }
      try {
        const { version, etag } = await t.put(id, request.body, receivedJson(request));
        return reply.header('etag', etag).send({ version });
      } catch (err) {
        // The body parsed, so only depth can stop JSON.stringify: the client's value, a 400.
        if (err instanceof BadValueError) {
          throw new BadRequestError('the body cannot be stored as JSON (nested too deeply)', {
            table,
            id,
            cause: err,
          });
        }
        throw err;
      }
    },
  );

  app.delete<{ Params: ItemParams }>(
    ITEM_PATH,
    {
      schema: {
        summary: 'Invalidate an item (admin)',
        tags: ITEMS,
        security: ADMIN_SECURITY,
        params,
        response: {
          204: { description: 'Valkey confirmed the tombstone.', type: 'null' },
          ...errorResponses({
            400: ['ECC_BAD_ID'],
            ...ADMIN_ERRORS,
            404: ['ECC_UNKNOWN_TABLE'],
            503: ['ECC_VALKEY_UNAVAILABLE', 'ECC_CLOSED'],
          }),
        },
      },
      ...admin,
    },
    async (request, reply) => {
      const { table, id } = request.params;
      await store.table(table).invalidate(id);
      return reply.code(204).send();
    },
  );

  allowOnly(app, ITEM_PATH, ['GET', 'HEAD', 'PUT', 'DELETE']);
}

/**
 * `If-None-Match` (RFC 9110 §13.1.2): `*`, or a list of entity tags compared
 * weakly (a `W/` prefix is ignored on either side).
 */
function noneMatch(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}

/** The cache's name in `Cache-Status` (RFC 9211 §2). */
export const CACHE_NAME = 'echostore';

/**
 * The headers a read's answer carries before its `ETag`, in their order, as name/value pairs
 * (Node's `writeHead` array): `Cache-Status` (`status`), then `Cache-Control` and `Age` when
 * the table sends caching headers, then `Vary` on the read-your-writes header of a table that
 * follows a change stream (`ryw`), so that a cache in front never answers a read-your-writes
 * request with a copy of a plain read. A read-your-writes answer (`readYourWrites`) is
 * `no-store`: one client's answer is not for a shared cache to reuse (RFC 9111 §5.2.2.5).
 * The item route and the L1 hit answered before fastify (`l1-hits.ts`) both send these.
 */
export function readHeaders(
  result: ReadResult,
  policy: TablePolicy,
  status: string,
  ryw: ReadAfter | undefined,
  readYourWrites: boolean,
): string[] {
  const out = ['cache-status', status];
  const caching = cachingHeaders(result, policy);
  if (caching !== undefined) {
    out.push('cache-control', readYourWrites ? 'no-store' : caching['cache-control']);
    out.push('age', caching.age);
  }
  if (ryw !== undefined) out.push('vary', ryw.format.header);
  return out;
}

/**
 * The `Cache-Status` header value of a read (RFC 9211).
 *
 * - answered by L1 or L2: `echostore; hit; ttl=<s>; detail=l1|l2|l1-negative|l2-negative`;
 *   served stale (stale-while-revalidate, stale-if-error): `detail=l1-stale|l2-stale`
 *   and a negative `ttl` (RFC 9211 §2.6: how long ago it went stale)
 * - answered by the source: `echostore; fwd=miss; fwd-status=200|404; stored`
 *   (`stored` only when the answer was kept: not when its fill was refused or
 *   a write superseded it), plus `; collapsed` when this request attached to
 *   another's flight.
 *
 * `ttl` is the remaining freshness lifetime (soft TTL) in whole seconds.
 */
export function cacheStatus(result: ReadResult): string {
  // Whole seconds, toward zero: a value stale for 0.2 s says ttl=0, not -1.
  const ttl = Math.trunc(result.ttlMs / 1000);
  if (result.layer === 'origin') {
    const status = result.found ? 200 : 404;
    const collapsed = result.coalesced ? '; collapsed' : '';
    const stored = result.stored ? '; stored' : '';
    return `${CACHE_NAME}; fwd=miss; fwd-status=${status}${stored}; ttl=${ttl}${collapsed}`;
  }
  const detail = !result.found
    ? `${result.layer}-negative`
    : result.stale
      ? `${result.layer}-stale`
      : result.layer;
  return `${CACHE_NAME}; hit; ttl=${ttl}; detail=${detail}`;
}
