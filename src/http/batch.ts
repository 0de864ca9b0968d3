/**
 * Batch reads: `GET /v1/tables/:table/items?ids=a,b,c` and
 * `POST /v1/tables/:table/items:batchGet` with `{ "ids": [...] }`. Every id
 * goes through `Table.getMany` (the same L1 → L2 → flight path as one GET)
 * and is answered on its own: found, not found, or a coded error. One id's
 * failure never fails the batch.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BadIdError, BadRequestError, type EchoStoreError } from '../errors.js';
import type { Store } from '../store/store.js';
import { MAX_BATCH_IDS, type Table } from '../store/table.js';
import type { BatchEntry } from '../store/types.js';
import { errorBody, logAnswered } from './errors.js';
import { cacheStatus } from './items.js';
import { allowOnly } from './methods.js';
import { ERROR_SCHEMA, errorResponses, TABLE_PARAMS } from './openapi.js';
import { exactTableInput } from './table-input.js';

const ITEMS_PATH = '/v1/tables/:table/items';
/** `::` is find-my-way's literal colon: the path is `…/items:batchGet`. */
const BATCH_GET_PATH = '/v1/tables/:table/items::batchGet';

const querystring = {
  type: 'object',
  required: ['ids'],
  properties: {
    ids: {
      type: 'string',
      minLength: 1,
      description: `Comma-separated ids, at most ${MAX_BATCH_IDS}; percent-encode a comma inside an id as %2C.`,
    },
  },
} as const;

const body = {
  type: 'object',
  required: ['ids'],
  additionalProperties: false,
  properties: {
    ids: {
      type: 'array',
      minItems: 1,
      maxItems: MAX_BATCH_IDS,
      items: { type: 'string' },
      description: `The ids, 1 to ${MAX_BATCH_IDS} strings.`,
    },
  },
} as const;

/** The answer: one item per distinct id, in the order of first appearance. */
const response = {
  200: {
    type: 'object',
    required: ['items'],
    properties: {
      items: {
        type: 'array',
        items: {
          type: 'object',
          required: ['id', 'status'],
          properties: {
            id: { type: 'string' },
            status: { type: 'string', enum: ['found', 'not_found', 'error'] },
            version: {
              type: 'integer',
              description:
                'found: the item version (orders writes; the ETag of a single GET is a hash of the value)',
            },
            cacheStatus: {
              type: 'string',
              description: 'found, not_found: the Cache-Status (RFC 9211) of this id',
            },
            value: { description: 'found: the item (any JSON value)' },
            error: {
              ...ERROR_SCHEMA.properties.error,
              description: 'error: the coded error of this id alone',
            },
          },
        },
      },
    },
  },
  ...errorResponses({
    400: ['ECC_BAD_REQUEST'],
    404: ['ECC_UNKNOWN_TABLE'],
    415: ['ECC_UNSUPPORTED_MEDIA_TYPE'],
  }),
} as const;

/** An id as asked: decoded, or the raw text of one that does not decode with its error. */
interface Asked {
  id: string;
  error?: EchoStoreError;
}

/**
 * The batch routes. 404 `ECC_UNKNOWN_TABLE` before the ids are validated;
 * 400 `ECC_BAD_REQUEST` for no ids, more than {@link MAX_BATCH_IDS}, or a
 * body that breaks its schema; otherwise 200 with a per-id status.
 */
export function batchRoutes(app: FastifyInstance, store: Store): void {
  const common = exactTableInput(store);

  app.get<{ Params: { table: string }; Querystring: { ids: string } }>(
    ITEMS_PATH,
    { ...common, schema: { params: TABLE_PARAMS, querystring, response } },
    async (request, reply) => {
      const table = store.table(request.params.table);
      return answer(request, reply, table, idsOfQuery(request.raw.url ?? ''));
    },
  );

  app.post<{ Params: { table: string }; Body: { ids: string[] } }>(
    BATCH_GET_PATH,
    { ...common, schema: { params: TABLE_PARAMS, body, response } },
    async (request, reply) => {
      const table = store.table(request.params.table);
      return answer(
        request,
        reply,
        table,
        request.body.ids.map((id) => ({ id })),
      );
    },
  );

  allowOnly(app, ITEMS_PATH, ['GET', 'HEAD']);
  allowOnly(app, BATCH_GET_PATH, ['POST']);
}

async function answer(
  request: FastifyRequest,
  reply: FastifyReply,
  table: Table,
  asked: Asked[],
): Promise<FastifyReply> {
  if (asked.length > MAX_BATCH_IDS) {
    throw new BadRequestError(`at most ${MAX_BATCH_IDS} ids per request (got ${asked.length})`, {
      table: table.name,
    });
  }
  const entries = await table.getMany(asked.filter((a) => a.error === undefined).map((a) => a.id));
  const byId = new Map(entries.map((e) => [e.id, e]));
  const seen = new Set<string>();
  const seenBad = new Set<string>();
  const items: string[] = [];
  for (const a of asked) {
    if (a.error !== undefined) {
      if (seenBad.has(a.id)) continue;
      seenBad.add(a.id);
      items.push(errorItem(request, a.id, a.error));
      continue;
    }
    if (seen.has(a.id)) continue;
    seen.add(a.id);
    items.push(itemOf(request, byId.get(a.id) as BatchEntry));
  }
  // Values are already JSON text (as the item route sends them): no re-serialisation.
  return reply.type('application/json; charset=utf-8').send(`{"items":[${items.join(',')}]}`);
}

function itemOf(request: FastifyRequest, entry: BatchEntry): string {
  const id = JSON.stringify(entry.id);
  if (!entry.ok) return errorItem(request, entry.id, entry.error);
  const { result } = entry;
  const status = JSON.stringify(cacheStatus(result));
  if (!result.found) return `{"id":${id},"status":"not_found","cacheStatus":${status}}`;
  return `{"id":${id},"status":"found","version":${result.version},"cacheStatus":${status},"value":${result.json}}`;
}

function errorItem(request: FastifyRequest, id: string, error: EchoStoreError): string {
  logAnswered(request, error);
  const coded = JSON.stringify(errorBody(error).error);
  return `{"id":${JSON.stringify(id)},"status":"error","error":${coded}}`;
}

/**
 * The ids of the `ids` query parameter, split on literal commas *before*
 * percent-decoding (so `%2C` is a comma inside an id; `+` is a space, as in
 * any form-encoded query). A piece that is not valid percent-encoded UTF-8 is
 * kept, raw, with its `ECC_BAD_ID`.
 */
export function idsOfQuery(url: string): Asked[] {
  const query = url.slice(url.indexOf('?') + 1);
  const raw = query.split('&').find((pair) => decodePiece(pair.split('=')[0] ?? '') === 'ids');
  if (raw === undefined || !url.includes('?')) return [];
  const value = raw.slice(raw.indexOf('=') + 1);
  return value.split(',').map((piece) => {
    const id = decodePiece(piece);
    if (id !== undefined) return { id };
    return {
      id: piece,
      error: new BadIdError('the id is not valid percent-encoded UTF-8', { id: piece }),
    };
  });
}

function decodePiece(piece: string): string | undefined {
  try {
    return decodeURIComponent(piece.replaceAll('+', ' '));
  } catch {
    return undefined;
  }
}
