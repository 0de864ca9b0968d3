import type { FastifyInstance } from 'fastify';
import { BadRequestError, MethodNotAllowedError, NotFoundError } from '../errors.js';
import type { Store } from '../store/store.js';
import { cacheStatus } from './cache-status.js';
import { sendError } from './errors.js';

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
 * The item routes: read (cache-aside, single-flight), write-through, invalidate.
 * Table and id checks live in the store, so the HTTP API and library callers
 * get the same codes.
 */
export function itemRoutes(app: FastifyInstance, store: Store): void {
  app.get<{ Params: ItemParams }>(ITEM_PATH, { schema: { params } }, async (request, reply) => {
    const { table, id } = request.params;
    const result = await store.table(table).get(id);
    reply.header('cache-status', cacheStatus(result));
    if (!result.found) {
      return sendError(
        request,
        reply,
        new NotFoundError(`no item ${id} in ${table}`, { table, id }),
      );
    }
    const etag = `"${result.version}"`;
    reply.header('etag', etag);
    // RFC 9110 §13.1.2: a matching If-None-Match on a GET answers 304 without a body.
    if (request.headers['if-none-match'] === etag) return reply.code(304).send();
    return reply.type('application/json; charset=utf-8').send(result.json);
  });

  app.put<{ Params: ItemParams; Body: unknown }>(
    ITEM_PATH,
    { schema: { params } },
    async (request, reply) => {
      const { table, id } = request.params;
      const t = store.table(table);
      if (request.body === undefined) {
        throw new BadRequestError('a JSON body (application/json) is required', { table, id });
      }
      const { version } = await t.put(id, request.body);
      return reply.header('etag', `"${version}"`).send({ version });
    },
  );

  app.delete<{ Params: ItemParams }>(ITEM_PATH, { schema: { params } }, async (request, reply) => {
    const { table, id } = request.params;
    await store.table(table).invalidate(id);
    return reply.code(204).send();
  });

  app.route({
    method: ['POST', 'PATCH'],
    url: ITEM_PATH,
    handler: async (_request, reply) => {
      reply.header('allow', 'GET, HEAD, PUT, DELETE');
      throw new MethodNotAllowedError('use GET, HEAD, PUT or DELETE on an item');
    },
  });
}
