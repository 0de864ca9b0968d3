import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/store.js';
import { readIds } from '../warm/read-ids.js';
import type { AdminRouteOptions } from './auth.js';
import { allowOnly } from './methods.js';
import { ADMIN_ERRORS, ADMIN_SECURITY, errorResponses, TABLE_PARAMS } from './openapi.js';
import { exactTableInput } from './table-input.js';

/** Most ids one warm-up request may name. */
export const MAX_WARM_IDS = 1000;

/** Reads one warm-up request keeps in progress at once. */
export const WARM_CONCURRENCY = 8;

const WARM_PATH = '/v1/tables/:table/warm';

const body = {
  type: 'object',
  required: ['ids'],
  additionalProperties: false,
  properties: {
    ids: { type: 'array', minItems: 1, maxItems: MAX_WARM_IDS, items: { type: 'string' } },
  },
} as const;

const answer = {
  description: 'Every id counted once: warmed, not found, or failed (in request order).',
  type: 'object',
  required: ['warmed', 'notFound', 'failed'],
  additionalProperties: false,
  properties: {
    warmed: { type: 'integer' },
    notFound: { type: 'integer' },
    failed: {
      type: 'array',
      items: {
        type: 'object',
        required: ['id', 'code'],
        additionalProperties: false,
        properties: { id: { type: 'string' }, code: { type: 'string' } },
      },
    },
  },
} as const;

/**
 * `POST /v1/tables/:table/warm` with `{ "ids": [...] }` (1–{@link MAX_WARM_IDS}
 * strings): reads each id into the cache, {@link WARM_CONCURRENCY} at a time,
 * and answers 200 with a `WarmAnswer` (src/warm/read-ids.ts).
 * 404 `ECC_UNKNOWN_TABLE` before the body is validated; 400 `ECC_BAD_REQUEST`
 * for a body that breaks the schema. `admin` guards it.
 */
export function warmRoutes(app: FastifyInstance, store: Store, admin: AdminRouteOptions): void {
  app.post<{ Params: { table: string }; Body: { ids: string[] } }>(
    WARM_PATH,
    {
      ...admin,
      schema: {
        summary: 'Read a list of ids into the cache (admin)',
        tags: ['items'],
        security: ADMIN_SECURITY,
        params: TABLE_PARAMS,
        body,
        response: {
          200: answer,
          ...errorResponses({
            400: ['ECC_BAD_REQUEST'],
            ...ADMIN_ERRORS,
            404: ['ECC_UNKNOWN_TABLE'],
            413: ['ECC_PAYLOAD_TOO_LARGE'],
            415: ['ECC_UNSUPPORTED_MEDIA_TYPE'],
          }),
        },
      },
      ...exactTableInput(store),
    },
    async (request) => {
      const table = store.table(request.params.table);
      const answer = await readIds(table, request.body.ids, request.log, {
        concurrency: WARM_CONCURRENCY,
      });
      request.log.debug(
        {
          table: table.name,
          warmed: answer.warmed,
          notFound: answer.notFound,
          failed: answer.failed.length,
        },
        'warm-up',
      );
      return answer;
    },
  );
  allowOnly(app, WARM_PATH, ['POST']);
}
