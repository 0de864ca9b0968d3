import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { UnauthorizedError } from '../errors.js';

/** Route options that guard an admin route; empty when no token is configured. */
export interface AdminRouteOptions {
  onRequest?: (request: FastifyRequest) => Promise<void>;
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/**
 * Route options that admit a request only when it carries
 * `Authorization: Bearer <token>` (RFC 6750 §2.1; the scheme is
 * case-insensitive, RFC 9110 §11.1). Runs `onRequest`, before the body is read.
 *
 * Both sides are hashed with SHA-256 and compared with `timingSafeEqual`, so
 * neither the token's content nor its length shows in the response time.
 *
 * @param token the admin token, or `undefined` for none: the routes are then
 *   open and pay nothing.
 * @throws {TypeError} when `token` is given but empty or contains whitespace.
 * @returns `{ onRequest }` rejecting with `ECC_UNAUTHORIZED` (401), or `{}`.
 */
export function adminOnly(token: string | undefined): AdminRouteOptions {
  if (token === undefined) return {};
  if (typeof token !== 'string' || token.length === 0 || /\s/.test(token)) {
    throw new TypeError('adminToken must be a non-empty string without whitespace');
  }
  const expected = sha256(token);
  return {
    onRequest: async (request) => {
      const presented = bearerToken(request.headers.authorization);
      if (presented === undefined || !timingSafeEqual(sha256(presented), expected)) {
        throw new UnauthorizedError('send Authorization: Bearer <admin token>');
      }
    },
  };
}

/** The credentials of a `Bearer` Authorization header, or `undefined` for another scheme or none. */
function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const space = header.indexOf(' ');
  if (space < 0 || header.slice(0, space).toLowerCase() !== 'bearer') return undefined;
  return header.slice(space + 1).trim();
}
