import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  BadIdError,
  BadRequestError,
  EchoStoreError,
  InternalError,
  PayloadTooLargeError,
  RouteNotFoundError,
  ShedError,
  UnsupportedMediaTypeError,
} from '../errors.js';

/** The JSON body of every error answer. */
export interface ErrorBody {
  error: { code: string; message: string };
}

/**
 * Maps anything thrown while serving a request to an {@link EchoStoreError}:
 * EchoStore errors pass through; fastify's own 4xx errors (body parsing,
 * schema validation, bad URL) become the matching client error; anything
 * else is `ECC_INTERNAL`.
 */
export function toStoreError(err: unknown): EchoStoreError {
  if (err instanceof EchoStoreError) return err;
  const fe = err as Partial<FastifyError>;
  const status = typeof fe.statusCode === 'number' ? fe.statusCode : 500;
  const message = typeof fe.message === 'string' ? fe.message : 'request failed';
  if (status === 413) return new PayloadTooLargeError('request body is too large', { cause: err });
  if (status === 415)
    return new UnsupportedMediaTypeError('send the body as application/json', { cause: err });
  if (fe.code === 'FST_ERR_BAD_URL')
    return new BadIdError('the URL is not valid percent-encoded UTF-8', { cause: err });
  if (status >= 400 && status < 500) return new BadRequestError(message, { cause: err });
  return new InternalError('internal error', { cause: err });
}

/** Sends the coded JSON error answer; `Retry-After` (seconds) on shedding. */
export function sendError(
  request: FastifyRequest,
  reply: FastifyReply,
  err: unknown,
): FastifyReply {
  const e = toStoreError(err);
  if (e.statusCode >= 500) request.log.error({ err: e.cause ?? e, code: e.code }, e.message);
  else request.log.debug({ code: e.code }, e.message);
  if (e instanceof ShedError)
    reply.header('retry-after', String(Math.max(1, Math.ceil(e.retryAfterMs / 1000))));
  const body: ErrorBody = { error: { code: e.code, message: e.message } };
  return reply.code(e.statusCode).type('application/json; charset=utf-8').send(body);
}

/** Installs the error and not-found handlers: every error is `{ error: { code, message } }`. */
export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err, request, reply) => sendError(request, reply, err));
  app.setNotFoundHandler((request, reply) =>
    sendError(
      request,
      reply,
      new RouteNotFoundError(`no route for ${request.method} ${request.url.slice(0, 200)}`),
    ),
  );
}
