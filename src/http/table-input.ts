/**
 * The input handling the batch and warm routes share: their ids are taken
 * exactly as sent (fastify's own Ajv coerces: `"a"` → `["a"]`, `1` → `"1"`),
 * and an unknown table is answered 404 `ECC_UNKNOWN_TABLE` before the body is
 * read (so before a 415 or 400 about it) and the input validated.
 */
import { Ajv } from 'ajv';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Store } from '../store/store.js';

const exact = new Ajv({ coerceTypes: false, allErrors: false, strict: true });

/**
 * Route options (`validatorCompiler`, `preParsing`) of a `/v1/tables/:table/…`
 * route whose input is validated without coercion, after its table is found.
 * The table is looked up in `preParsing`: after `onRequest` (the admin token,
 * so an unauthenticated caller learns nothing of the tables), before the body.
 *
 * @throws {UnknownTableError} (from `preParsing`) `ECC_UNKNOWN_TABLE` for a table not configured.
 */
export function exactTableInput(store: Store) {
  return {
    validatorCompiler: ({ schema }: { schema: object }) => exact.compile(schema),
    preParsing: async <P>(
      request: FastifyRequest<{ Params: { table: string } }>,
      _reply: FastifyReply,
      payload: P,
    ) => {
      store.table(request.params.table);
      return payload;
    },
  };
}
