import { createHash, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import type { FastifyRequest } from 'fastify';
import { ProtectedModeError, UnauthorizedError } from '../errors.js';
import { hostLines } from './client-errors.js';

/** Route options that guard an admin route: the bearer token, or protected mode without one. */
export interface AdminRouteOptions {
  onRequest?: (request: FastifyRequest) => Promise<void>;
}

/** What a client outside loopback is told while no token is set: how to set one. */
export const PROTECTED_MODE_HINT =
  'no admin token is set, so write and admin routes answer loopback clients only: set ECHOSTORE_ADMIN_TOKEN (or http.adminToken) and send Authorization: Bearer <token>';

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/**
 * Route options for the write and admin routes (PUT, DELETE, warm-up, and any
 * route given these options).
 *
 * With a token: they admit a request only when it carries
 * `Authorization: Bearer <token>` (RFC 6750 §2.1; the scheme is
 * case-insensitive, RFC 9110 §11.1). Both sides are hashed with SHA-256 and
 * compared with `timingSafeEqual`, so neither the token's content nor its
 * length shows in the response time.
 *
 * Without one: protected mode, as Redis's — they answer only clients whose
 * address is loopback (`127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`); any
 * other gets 403 `ECC_PROTECTED_MODE` saying how to set a token. The request's
 * `Host` must name loopback too (`localhost`, `127.x.y.z`, `[::1]`; one `Host`, and an
 * absolute-form target's own authority), so a page
 * that a DNS rebinding points at this port from a browser on the same host is
 * refused as well. A reverse proxy on the same host makes every client look
 * local: set a token there.
 *
 * Runs `onRequest`, before the body is read.
 *
 * @param token the admin token, or `undefined` for none (protected mode).
 * @throws {TypeError} when `token` is given but empty or contains whitespace.
 * @returns `{ onRequest }` rejecting with `ECC_UNAUTHORIZED` (401) or `ECC_PROTECTED_MODE` (403).
 */
export function adminOnly(token: string | undefined): AdminRouteOptions {
  if (token === undefined) {
    return {
      onRequest: async (request) => {
        if (!isLoopback(request.socket.remoteAddress) || !isLoopback(hostName(targetHost(request))))
          throw new ProtectedModeError(PROTECTED_MODE_HINT);
      },
    };
  }
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

/**
 * Whether `address` (a socket's remote address, or a listen host) is on the
 * loopback interface: `127.0.0.0/8`, `::1`, an IPv4-mapped `::ffff:127.x.y.z`,
 * or the name `localhost`. Anything else, or none, is not.
 */
export function isLoopback(address: string | undefined): boolean {
  if (address === undefined) return false;
  if (address === 'localhost' || address === '::1') return true;
  const v4 = address.startsWith('::ffff:') ? address.slice(7) : address;
  return isIP(v4) === 4 && v4.startsWith('127.');
}

/**
 * The one host a request names, `host[:port]` (RFC 9112 §3.2.2): an absolute-form target's
 * authority (a server ignores `Host` then), else its `Host` header; undefined when it has none,
 * or more than one (RFC 9112 §3.2: a 400, and never trusted here).
 */
function targetHost(request: FastifyRequest): string | undefined {
  const target = request.raw.url ?? '';
  if (!target.startsWith('/')) {
    try {
      return new URL(target).host;
    } catch {
      return undefined;
    }
  }
  return hostLines(request.raw.rawHeaders) === 1 ? request.headers.host : undefined;
}

/**
 * The host of a `Host` header without its port (`[::1]:8080` → `::1`), or
 * undefined when the header is absent or malformed. Parsed strictly as RFC 9110
 * §7.2 `uri-host [ ":" port ]`: an IPv6 literal in brackets with nothing after
 * `]` but an optional port, a port of digits in 0–65535, no whitespace.
 */
function hostName(host: string | undefined): string | undefined {
  if (host === undefined) return undefined;
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+))(?::(\d{1,5}))?$/.exec(host);
  if (match === null) return undefined;
  if (match[3] !== undefined && Number(match[3]) > 65535) return undefined;
  if (match[1] !== undefined) return isIP(match[1]) === 6 ? match[1] : undefined;
  return match[2]?.toLowerCase();
}

/** The credentials of a `Bearer` Authorization header, or `undefined` for another scheme or none. */
function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const space = header.indexOf(' ');
  if (space < 0 || header.slice(0, space).toLowerCase() !== 'bearer') return undefined;
  return header.slice(space + 1).trim();
}
