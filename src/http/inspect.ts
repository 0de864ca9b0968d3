/**
 * `GET /v1/admin/tables/:table/items/:id` (admin): what the cache holds for
 * one id, layer by layer — this instance's L1 row, the L2 value's header, the
 * lease and its holder — without loading it or touching its recency.
 */
import type { FastifyInstance } from 'fastify';
import { ValkeyUnavailableError } from '../errors.js';
import { decodeHeader } from '../l2/format.js';
import { leaseKey, valueKey } from '../l2/keys.js';
import type { Store } from '../store/store.js';
import { assertId, type PurgeKind, type Table } from '../store/table.js';
import type { AdminRouteOptions } from './auth.js';
import { allowOnly } from './methods.js';
import { ADMIN_ERRORS, ADMIN_SECURITY, errorResponses } from './openapi.js';

/** The L2 value's header as the inspect route reports it; times are milliseconds left on Valkey's clock. */
export interface L2Inspection {
  version: number;
  negative: boolean;
  /** Until stale (soft TTL); negative when it already is. */
  softTtlMs: number;
  /** Until Valkey drops it (`PTTL`, the hard TTL). */
  hardTtlMs: number;
  deltaMs: number;
  /** Bytes of the stored text (header and JSON). */
  bytes: number;
  /** The purge tags stored in its header, in stored order; empty when untagged. */
  tags: string[];
  /** A purge this instance knows of covers it (`hard`, `soft`), else null. */
  purged: PurgeKind | null;
}

/** The lease of an id while one instance loads it. */
export interface LeaseInspection {
  /** `<hostname>:<pid>` of the instance holding it (from its token). */
  holder: string;
  /** Until it expires unless renewed. */
  ttlMs: number;
}

const INSPECT_PATH = '/v1/admin/tables/:table/items/:id';

const nullable = (properties: Record<string, object>, description: string) => ({
  type: ['object', 'null'],
  description,
  additionalProperties: false,
  properties,
});
const int = { type: 'integer' } as const;
const bool = { type: 'boolean' } as const;
const tags = { type: 'array', items: { type: 'string' } } as const;
const purged = {
  type: ['string', 'null'],
  enum: ['hard', 'soft', null],
  description:
    'A purge this instance knows of covers the row: `hard` (the next read reloads it), `soft` (served stale while one refresh runs); null: none.',
} as const;

const schema = {
  summary: 'What the cache holds for an id, layer by layer (admin)',
  description:
    "This instance's L1 row, the Valkey value's header and the lease, with the time each has left and the purge tags each row carries; never loads. Times are milliseconds; a negative `softTtlMs` is how long ago it went stale.",
  tags: ['operator'],
  security: ADMIN_SECURITY,
  params: {
    type: 'object',
    required: ['table', 'id'],
    properties: { table: { type: 'string' }, id: { type: 'string' } },
  },
  response: {
    200: {
      type: 'object',
      required: ['table', 'id', 'l1', 'l2', 'lease'],
      additionalProperties: false,
      properties: {
        table: { type: 'string' },
        id: { type: 'string' },
        l1: nullable(
          {
            version: int,
            negative: bool,
            softTtlMs: int,
            hardTtlMs: int,
            l1TtlMs: int,
            deltaMs: int,
            bytes: int,
            tags,
            purged,
          },
          "This instance's L1 row, or null.",
        ),
        l2: nullable(
          {
            version: int,
            negative: bool,
            softTtlMs: int,
            hardTtlMs: int,
            deltaMs: int,
            bytes: int,
            tags,
            purged,
          },
          'The Valkey value, or null (absent, or not of this format).',
        ),
        lease: nullable(
          { holder: { type: 'string' }, ttlMs: int },
          'The lease while an instance loads the id, or null.',
        ),
      },
    },
    ...errorResponses({
      400: ['ECC_BAD_ID'],
      ...ADMIN_ERRORS,
      404: ['ECC_UNKNOWN_TABLE'],
      503: ['ECC_VALKEY_UNAVAILABLE'],
    }),
  },
} as const;

/** Registers the inspect route; `admin` guards it. */
export function inspectRoutes(app: FastifyInstance, store: Store, admin: AdminRouteOptions): void {
  app.get<{ Params: { table: string; id: string } }>(
    INSPECT_PATH,
    { ...admin, schema },
    async (request) => {
      const { table: name, id } = request.params;
      const table = store.table(name);
      assertId(name, id, table.policy.idPattern);
      let l2: L2Inspection | null;
      let lease: LeaseInspection | null;
      try {
        [l2, lease] = await Promise.all([readL2(store, table, id), readLease(store, name, id)]);
      } catch (cause) {
        throw new ValkeyUnavailableError('valkey did not answer the inspection', {
          table: name,
          id,
          cause,
        });
      }
      return { table: name, id, l1: table.inspectL1(id) ?? null, l2, lease };
    },
  );
  allowOnly(app, INSPECT_PATH, ['GET', 'HEAD']);
}

/**
 * The value's header. Its expiries are on Valkey's clock, which `PTTL` reads
 * without a `TIME`: Valkey drops the key at `hardExpiresAt`, so its clock
 * reads `hardExpiresAt − PTTL` now.
 */
async function readL2(store: Store, table: Table, id: string): Promise<L2Inspection | null> {
  const key = valueKey(table.name, id, store.namespace);
  const [text, pttl] = await Promise.all([store.valkey.get(key), store.valkey.pttl(key)]);
  const header = text === null ? undefined : decodeHeader(text);
  if (text === null || header === undefined || pttl < 0) return null;
  const valkeyNow = header.hardExpiresAt - pttl;
  return {
    version: header.version,
    negative: (header.flags & 1) === 1,
    softTtlMs: header.softExpiresAt - valkeyNow,
    hardTtlMs: pttl,
    deltaMs: header.deltaMs,
    bytes: Buffer.byteLength(text),
    tags: header.tags === '' ? [] : header.tags.split(' '),
    purged: table.purgeOf(header.born, header.tags === '' ? undefined : header.tags.split(' ')),
  };
}

async function readLease(store: Store, table: string, id: string): Promise<LeaseInspection | null> {
  const key = leaseKey(table, id, store.namespace);
  const [token, pttl] = await Promise.all([store.valkey.get(key), store.valkey.pttl(key)]);
  if (token === null || pttl < 0) return null;
  const slash = token.lastIndexOf('/');
  return { holder: slash < 0 ? 'unknown' : token.slice(0, slash), ttlMs: pttl };
}
