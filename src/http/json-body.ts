import type { FastifyInstance, FastifyRequest } from 'fastify';
import { BadRequestError, UnsupportedMediaTypeError } from '../errors.js';
import { routeNotFound } from './errors.js';

/** Methods whose body means nothing to any route here: it is read and dropped, never parsed. */
const BODY_IGNORED = new Set(['DELETE', 'OPTIONS']);

/** The JSON text of each parsed body, trimmed, as the client sent it. */
const received = new WeakMap<FastifyRequest, string>();

/**
 * The request's body as the client sent it (UTF-8 decoded, surrounding
 * whitespace trimmed) once it parsed as JSON, so that a PUT stores that text
 * rather than `JSON.stringify` of the parsed value (which rounds an integer
 * past 2^53); `undefined` when the request had no JSON body.
 */
export function receivedJson(request: FastifyRequest): string | undefined {
  return received.get(request);
}

/** The `charset` parameter of a Content-Type, lower-cased, or `undefined` when absent. */
function charsetOf(contentType: string | undefined): string | undefined {
  return /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(contentType ?? '')?.[1]?.toLowerCase();
}

/**
 * Decides what happens to a body before fastify parses it (its parsers run
 * after `onRequest`, before `preValidation`):
 *
 * - an unknown route is 404 `ECC_ROUTE_NOT_FOUND` whatever its body (a
 *   malformed one would otherwise be a 400, and close the connection);
 * - a DELETE's or an OPTIONS's body is ignored, whatever its type: its
 *   `content-type` is dropped here, so it reaches the catch-all parser, which
 *   lets Node read and discard it (bounded by `requestTimeoutMs`).
 *
 * Then makes `application/json` the only body type, UTF-8 only: a `charset` other
 * than `utf-8` is 415 `ECC_UNSUPPORTED_MEDIA_TYPE` (RFC 8259 §8.1: JSON
 * between systems is UTF-8; fastify itself ignores the parameter), and bytes
 * that are not valid UTF-8 are 400 `ECC_BAD_REQUEST`; a `Content-Encoding`
 * other than `identity` (a gzip body, say) is 415 (RFC 9110 §8.4.1). The text
 * is then parsed by fastify's own parser (secure-json-parse), which refuses
 * `__proto__` and `constructor.prototype` keys (400 `ECC_BAD_REQUEST`).
 * Any other content type is 415.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  app.addHook('onRequest', (request, _reply, done) => {
    if (request.is404) {
      done(routeNotFound(request));
      return;
    }
    if (BODY_IGNORED.has(request.method)) delete request.headers['content-type'];
    done();
  });
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (request, payload, done) => {
    if (!BODY_IGNORED.has(request.method)) {
      done(new UnsupportedMediaTypeError('send the body as application/json'));
      return;
    }
    payload.resume();
    done(null, undefined);
  });
  // fatal: bytes that are not UTF-8 are refused, not replaced by U+FFFD (what the client sent is what is stored).
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    // RFC 9110 §8.4.1: a content coding the server does not apply is 415, never stored as is.
    const coding = request.headers['content-encoding'];
    if (coding !== undefined && coding.trim().toLowerCase() !== 'identity') {
      done(new UnsupportedMediaTypeError('send the body without a Content-Encoding (gzip, …)'));
      return;
    }
    const charset = charsetOf(request.headers['content-type']);
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      done(new UnsupportedMediaTypeError('send the body as application/json; charset=utf-8'));
      return;
    }
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      done(new BadRequestError('the body is not valid UTF-8'));
      return;
    }
    parse(request, text, (err, value) => {
      if (err === null) received.set(request, text.trim());
      done(err, value);
    });
  });
}
