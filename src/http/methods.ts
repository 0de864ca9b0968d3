import type { FastifyInstance } from 'fastify';
import { MethodNotAllowedError } from '../errors.js';
import { errorResponses } from './openapi.js';

/**
 * Declares the methods `url` serves (its routes are registered elsewhere):
 * `OPTIONS` answers 204 with `Allow`, and every other method fastify routes
 * (`POST`, `PATCH`, `TRACE`, `QUERY`, and every other one Node parses, `PROPFIND`,
 * `PURGE`, …: `buildServer` adds them) answers 405 `ECC_METHOD_NOT_ALLOWED`
 * with `Allow` (RFC 9110 §15.5.6).
 *
 * @param allowed the methods the path's own routes serve, `HEAD` included when it has a GET.
 */
export function allowOnly(app: FastifyInstance, url: string, allowed: readonly string[]): void {
  const allow = [...allowed, 'OPTIONS'].join(', ');
  app.options(
    url,
    {
      schema: {
        summary: 'The methods this path serves',
        response: {
          204: {
            description: 'No body; `Allow` lists the methods.',
            type: 'null',
            headers: { allow: { type: 'string', description: allow } },
          },
          ...errorResponses({}),
        },
      },
    },
    async (_request, reply) => reply.code(204).header('allow', allow).send(),
  );
  const refused = app.supportedMethods.filter((m) => !allowed.includes(m) && m !== 'OPTIONS');
  app.route({
    method: refused,
    url,
    // Not an operation: the OpenAPI document says which methods the path serves.
    schema: { hide: true },
    // onRequest, before the body is read: the method is wrong whatever the body is.
    onRequest: async (_request, reply) => {
      reply.header('allow', allow);
      throw new MethodNotAllowedError(`use ${allow} on this path`);
    },
    handler: async () => {},
  });
}
