import type { FastifyInstance } from 'fastify';
import { UnsupportedMediaTypeError } from '../errors.js';

/** The `charset` parameter of a Content-Type, lower-cased, or `undefined` when absent. */
function charsetOf(contentType: string | undefined): string | undefined {
  return /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(contentType ?? '')?.[1]?.toLowerCase();
}

/**
 * Makes `application/json` the only body type, UTF-8 only: a `charset` other
 * than `utf-8` is 415 `ECC_UNSUPPORTED_MEDIA_TYPE` (RFC 8259 §8.1: JSON
 * between systems is UTF-8; fastify itself ignores the parameter). The text
 * is then parsed by fastify's own parser (secure-json-parse), which refuses
 * `__proto__` and `constructor.prototype` keys (400 `ECC_BAD_REQUEST`).
 * Any other content type is 415.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const charset = charsetOf(request.headers['content-type']);
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      done(new UnsupportedMediaTypeError('send the body as application/json; charset=utf-8'));
      return;
    }
    parse(request, body as string, done);
  });
}
