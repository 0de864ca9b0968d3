/**
 * Batch reads: `GET /v1/tables/:table/items?ids=a,b,c` and
 * `POST /v1/tables/:table/items:batchGet` with `{ "ids": [...] }`. Every id
 * goes through `Table.readWaves` (the same L1 → L2 → flight path as one GET,
 * in waves bounded by bytes) and is answered on its own: found, not found, or
 * a coded error. One id's failure never fails the batch. The answer is
 * streamed a wave at a time, and is bounded by `maxBatchBytes`.
 */

import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { MIN_BINLOG_HEADER, MIN_LSN_HEADER } from '../changes/read-your-writes.js';
import { BadIdError, BadRequestError, BatchTooLargeError, type EchoStoreError } from '../errors.js';
import type { Store } from '../store/store.js';
import { MAX_BATCH_IDS, type Table } from '../store/table.js';
import type { BatchEntry } from '../store/types.js';
import { errorBody, logAnswered } from './errors.js';
import { cacheStatus } from './items.js';
import { allowOnly } from './methods.js';
import { ERROR_SCHEMA, errorResponses, TABLE_PARAMS } from './openapi.js';
import { exactTableInput } from './table-input.js';
import { inCallerTrace } from './trace-context.js';

/** The default of `http.maxBatchBytes`: 64 MiB of items in one batch answer. */
export const DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024;

/** The answer goes out in pieces of about this many characters (or a wave's items, if fewer). */
const CHUNK_CHARS = 64 * 1024;

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
 * 400 `ECC_BAD_REQUEST` for no ids, more than {@link MAX_BATCH_IDS}, a
 * body that breaks its schema, or a read-your-writes header (only the
 * single-item route waits for a commit position); otherwise 200 with a per-id status.
 */
export function batchRoutes(
  app: FastifyInstance,
  store: Store,
  maxBytes: number = DEFAULT_MAX_BATCH_BYTES,
): void {
  const common = exactTableInput(store);

  app.get<{ Params: { table: string }; Querystring: { ids: string } }>(
    ITEMS_PATH,
    { ...common, schema: { params: TABLE_PARAMS, querystring, response } },
    async (request, reply) => {
      const table = store.table(request.params.table);
      const asked = idsOfQuery(request.raw.url ?? '');
      if (store.traced) {
        return inCallerTrace(request.headers, () => answer(request, reply, table, asked, maxBytes));
      }
      return answer(request, reply, table, asked, maxBytes);
    },
  );

  app.post<{ Params: { table: string }; Body: { ids: string[] } }>(
    BATCH_GET_PATH,
    { ...common, schema: { params: TABLE_PARAMS, body, response } },
    async (request, reply) => {
      const table = store.table(request.params.table);
      const asked = request.body.ids.map((id) => ({ id }));
      if (store.traced) {
        return inCallerTrace(request.headers, () => answer(request, reply, table, asked, maxBytes));
      }
      return answer(request, reply, table, asked, maxBytes);
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
  maxBytes: number,
): Promise<FastifyReply> {
  // A batch does not wait for a commit position: answering it without would break the header's promise.
  if (
    request.headers[MIN_LSN_HEADER] !== undefined ||
    request.headers[MIN_BINLOG_HEADER] !== undefined
  ) {
    throw new BadRequestError(
      `${MIN_LSN_HEADER} and ${MIN_BINLOG_HEADER} are answered by the single-item route (GET /v1/tables/${table.name}/items/<id>), not by a batch read`,
      { table: table.name },
    );
  }
  if (asked.length > MAX_BATCH_IDS) {
    throw new BadRequestError(`at most ${MAX_BATCH_IDS} ids per request (got ${asked.length})`, {
      table: table.name,
    });
  }
  // Streamed: one wave's items at a time, read only as the client takes them (see answerText).
  return reply.type('application/json; charset=utf-8').send(
    Readable.from(answerText(request, table, distinctAsked(asked), maxBytes), {
      // No read-ahead: the next piece is made when the socket has taken the last one.
      highWaterMark: 1,
    }),
  );
}

/** Each id once, in the order of first appearance: a decoded id by its value, a bad one by its raw text. */
function distinctAsked(asked: readonly Asked[]): Asked[] {
  const seen = new Set<string>();
  const seenBad = new Set<string>();
  return asked.filter((a) => {
    const set = a.error === undefined ? seen : seenBad;
    if (set.has(a.id)) return false;
    set.add(a.id);
    return true;
  });
}

/**
 * The answer's text, a wave at a time: `{"items":[` … `]}`. The values are
 * already JSON text (as the item route sends them): no re-serialisation, and
 * never one string for the whole answer (a V8 string holds at most ~512 MiB).
 * Once the items sent reach `maxBytes`, every id not yet sent is answered
 * `ECC_BATCH_TOO_LARGE` (413) without being read, and no further wave is read.
 */
async function* answerText(
  request: FastifyRequest,
  table: Table,
  plan: readonly Asked[],
  maxBytes: number,
): AsyncGenerator<string, void, undefined> {
  const waves = table.readWaves(plan.filter((a) => a.error === undefined).map((a) => a.id));
  try {
    let wave: BatchEntry[] = [];
    let next = 0;
    let sent = 0;
    let full = false;
    let chunk = '{"items":[';
    for (const a of plan) {
      let text: string;
      if (a.error !== undefined) text = errorItem(request, a.id, a.error);
      else if (full) text = tooLarge(request, table, a.id, maxBytes);
      else {
        if (next === wave.length) {
          // What is ready goes out before the next wave is read.
          if (chunk.length > 0) yield chunk;
          chunk = '';
          wave = (await waves.next()).value ?? [];
          next = 0;
        }
        text = itemOf(request, wave[next++] as BatchEntry);
        if (sent + text.length > maxBytes) {
          full = true;
          await waves.return();
          text = tooLarge(request, table, a.id, maxBytes);
        }
      }
      chunk += sent === 0 ? text : `,${text}`;
      sent += text.length + 1;
      // Big rows go out a few at a time: the socket's back-pressure paces the writes, and
      // the event loop serves other requests in between.
      if (chunk.length >= CHUNK_CHARS) {
        yield chunk;
        chunk = '';
      }
    }
    yield `${chunk}]}`;
  } finally {
    await waves.return();
  }
}

function tooLarge(request: FastifyRequest, table: Table, id: string, maxBytes: number): string {
  return errorItem(
    request,
    id,
    new BatchTooLargeError(
      `the answer reached maxBatchBytes (${maxBytes}) before this id: ask for it in another request`,
      { table: table.name, id },
    ),
  );
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
