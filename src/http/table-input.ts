/**
 * The input handling the batch and warm routes share: their ids are taken
 * exactly as sent (fastify's own Ajv coerces: `"a"` → `["a"]`, `1` → `"1"`),
 * and an unknown table is answered 404 `ECC_UNKNOWN_TABLE` before the input
 * is validated.
 */
import { Ajv } from 'ajv';
import type { FastifyRequest } from 'fastify';
import type { Store } from '../store/store.js';

const exact = new Ajv({ coerceTypes: false, allErrors: false, strict: true });

/**
 * Route options (`validatorCompiler`, `preValidation`) of a `/v1/tables/:table/…`
 * route whose input is validated without coercion, after its table is found.
 *
 * @throws {UnknownTableError} (from `preValidation`) `ECC_UNKNOWN_TABLE` for a table not configured.
 */
export function exactTableInput(store: Store) {
  return {
    validatorCompiler: ({ schema }: { schema: object }) => exact.compile(schema),
    preValidation: async (request: FastifyRequest<{ Params: { table: string } }>) => {
      store.table(request.params.table);
    },
  };
}
