import type { FastifyInstance } from 'fastify';
import { BadRequestError, BadValueError, NotFoundError } from '../errors.js';
import type { Store } from '../store/store.js';
import type { ReadResult } from '../store/types.js';
import type { AdminRouteOptions } from './auth.js';
import { clip, sendError } from './errors.js';
import { allowOnly } from './methods.js';

interface ItemParams {
  table: string;
  id: string;
}

const params = {
  type: 'object',
  required: ['table', 'id'],
  properties: { table: { type: 'string' }, id: { type: 'string' } },
} as const;

const ITEM_PATH = '/v1/tables/:table/items/:id';

/**
 * The item routes: read (cache-aside, single-flight), write-through, invalidate;
 * `OPTIONS` and 405 for the other methods. Table and id checks live in the
 * store, so the HTTP API and library callers get the same codes. `admin`
 * guards the writes (PUT, DELETE).
 */
export function itemRoutes(app: FastifyInstance, store: Store, admin: AdminRouteOptions): void {
  app.get<{ Params: ItemParams }>(ITEM_PATH, { schema: { params } }, async (request, reply) => {
    const { table, id } = request.params;
    const result = await store.table(table).get(id);
    reply.header('cache-status', cacheStatus(result));
    if (!result.found) {
      return sendError(
        request,
        reply,
        new NotFoundError(`no item ${clip(id)} in ${table}`, { table, id }),
      );
    }
    const etag = `"${result.version}"`;
    reply.header('etag', etag);
    // RFC 9110 §13.1.2: a matching If-None-Match on a GET answers 304 without a body.
    if (noneMatch(request.headers['if-none-match'], etag)) return reply.code(304).send();
    return reply.type('application/json; charset=utf-8').send(result.json);
  });

  app.put<{ Params: ItemParams; Body: unknown }>(
    ITEM_PATH,
    { schema: { params }, ...admin },
    async (request, reply) => {
      const { table, id } = request.params;
      const t = store.table(table);
      if (request.body === undefined) {
        throw new BadRequestError('a JSON body (application/json) is required', { table, id });
      }
      try {
        const { version } = await t.put(id, request.body);
        return reply.header('etag', `"${version}"`).send({ version });
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
    { schema: { params }, ...admin },
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
