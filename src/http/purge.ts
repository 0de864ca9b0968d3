import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/store.js';
import { MAX_PURGE_TAGS } from '../store/tags.js';
import type { PurgeInput } from '../store/types.js';
import type { AdminRouteOptions } from './auth.js';
import { allowOnly } from './methods.js';
import { ADMIN_ERRORS, ADMIN_SECURITY, errorResponses, TABLE_PARAMS } from './openapi.js';
import { exactTableInput } from './table-input.js';

const PURGE_PATH = '/v1/tables/:table/purge';

const body = {
  type: 'object',
  additionalProperties: false,
  description: `Exactly one of \`tags\` (1–${MAX_PURGE_TAGS} tags, each 1–128 visible ASCII characters but \`|\`) and \`all: true\`; \`soft: true\` for a soft purge. Breaking those bounds is 400 \`ECC_BAD_PURGE\`.`,
  properties: {
    tags: {
      type: 'array',
      items: { type: 'string' },
      description: 'Purge every row carrying one of these tags.',
    },
    all: { type: 'boolean', description: '`true`: purge every row of the table.' },
    soft: {
      type: 'boolean',
      description:
        'Soft purge: purged rows are served stale while one refresh per row per fleet runs, and kept if it fails (stale-if-error). Default false (hard: purged rows are misses).',
    },
  },
} as const;

const answer = {
  description:
    'Valkey holds the purge and this instance applies it: no purged row is served by it from now on, by other instances once they hear the event (the coherence bound).',
  type: 'object',
  required: ['epoch'],
  additionalProperties: false,
  properties: {
    epoch: {
      type: 'integer',
      description:
        "The purge's epoch, µs on Valkey's clock: rows read from the source at or before it are purged.",
    },
  },
} as const;

/**
 * `POST /v1/tables/:table/purge` with `{ "tags": [...] }` or `{ "all": true }`,
 * and `"soft": true` for a soft purge: `Table.purge`, answered 200 `{ epoch }`.
 * 404 `ECC_UNKNOWN_TABLE` before the body is validated; 400 `ECC_BAD_REQUEST`
 * for a body that is not such an object, `ECC_BAD_PURGE` for one that breaks
 * the purge's rules. `admin` guards it.
 */
export function purgeRoutes(app: FastifyInstance, store: Store, admin: AdminRouteOptions): void {
  app.post<{ Params: { table: string }; Body: PurgeInput }>(
    PURGE_PATH,
    {
      ...admin,
      schema: {
        summary: 'Purge rows by tag, or every row of the table (admin)',
        tags: ['items'],
        security: ADMIN_SECURITY,
        params: TABLE_PARAMS,
        body,
        response: {
          200: answer,
          ...errorResponses({
            400: ['ECC_BAD_PURGE', 'ECC_BAD_REQUEST'],
            ...ADMIN_ERRORS,
            404: ['ECC_UNKNOWN_TABLE'],
            413: ['ECC_PAYLOAD_TOO_LARGE'],
            415: ['ECC_UNSUPPORTED_MEDIA_TYPE'],
            503: ['ECC_VALKEY_UNAVAILABLE', 'ECC_CLOSED'],
          }),
        },
      },
      ...exactTableInput(store),
    },
    async (request) => {
      const table = store.table(request.params.table);
      const result = await table.purge(request.body);
      request.log.info(
        { table: table.name, tags: request.body.tags?.length, all: request.body.all === true },
        'purged',
      );
      return result;
    },
  );
  allowOnly(app, PURGE_PATH, ['POST']);
}
