import { Ajv } from 'ajv';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { EchoStoreError, InternalError } from '../errors.js';
import type { Store } from '../store/store.js';
import type { Table } from '../store/table.js';
import type { AdminRouteOptions } from './auth.js';
import { allowOnly } from './methods.js';
import { ADMIN_SECURITY, errorResponses } from './openapi.js';

/** Most ids one warm-up request may name. */
export const MAX_WARM_IDS = 1000;

/** Reads one warm-up request keeps in progress at once. */
export const WARM_CONCURRENCY = 8;

/** The answer of a warm-up: every id is counted exactly once. */
export interface WarmAnswer {
  /** Ids now cached with a value (they were in L1 or L2, or the source had them). */
  warmed: number;
  /** Ids the source does not have (now negative-cached). */
  notFound: number;
  /** Ids whose read failed, in request order, with the error code (`ECC_BAD_ID`, `ECC_LOAD_FAILED`, …). */
  failed: { id: string; code: string }[];
}

const WARM_PATH = '/v1/tables/:table/warm';

const params = {
  type: 'object',
  required: ['table'],
  properties: { table: { type: 'string' } },
} as const;

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
 * Reads every id through `table.get` (cache-aside, so each miss is loaded and
 * cached), at most `concurrency` at a time. A failed read is recorded, never
 * thrown: one bad id does not fail the others.
 *
 * @param ids the ids, duplicates allowed (each occurrence is counted).
 * @param log where a non-store error (a bug) is logged.
 */
export async function warmTable(
  table: Table,
  ids: readonly string[],
  log: FastifyBaseLogger,
  concurrency = WARM_CONCURRENCY,
): Promise<WarmAnswer> {
  let warmed = 0;
  let notFound = 0;
  const failures: ({ id: string; code: string } | undefined)[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < ids.length) {
      const index = next++;
      const id = ids[index] as string;
      try {
        const result = await table.get(id);
        if (result.found) warmed++;
        else notFound++;
      } catch (err) {
        if (!(err instanceof EchoStoreError)) log.error({ err, table: table.name }, 'warm-up read');
        const code = err instanceof EchoStoreError ? err.code : InternalError.code;
        failures[index] = { id, code };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, ids.length) }, worker));
  return { warmed, notFound, failed: failures.filter((f) => f !== undefined) };
}

/**
 * `POST /v1/tables/:table/warm` with `{ "ids": [...] }` (1–{@link MAX_WARM_IDS}
 * strings): reads each id into the cache and answers 200 {@link WarmAnswer}.
 * 404 `ECC_UNKNOWN_TABLE` before the body is validated; 400 `ECC_BAD_REQUEST`
 * for a body that breaks the schema. `admin` guards it.
 */
export function warmRoutes(app: FastifyInstance, store: Store, admin: AdminRouteOptions): void {
  // fastify's own Ajv coerces (1 -> "1", "a" -> ["a"]); a warm-up list is taken exactly as sent.
  const ajv = new Ajv({ coerceTypes: false, allErrors: false, strict: true });
  app.post<{ Params: { table: string }; Body: { ids: string[] } }>(
    WARM_PATH,
    {
      ...admin,
      schema: {
        summary: 'Read a list of ids into the cache (admin)',
        tags: ['items'],
        security: ADMIN_SECURITY,
        params,
        body,
        response: {
          200: answer,
          ...errorResponses({
            400: ['ECC_BAD_REQUEST'],
            401: ['ECC_UNAUTHORIZED'],
            404: ['ECC_UNKNOWN_TABLE'],
            413: ['ECC_PAYLOAD_TOO_LARGE'],
            415: ['ECC_UNSUPPORTED_MEDIA_TYPE'],
          }),
        },
      },
      validatorCompiler: ({ schema }) => ajv.compile(schema),
      preValidation: async (request) => {
        store.table(request.params.table);
      },
    },
    async (request) => {
      const table = store.table(request.params.table);
      const answer = await warmTable(table, request.body.ids, request.log);
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
