import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  BadIdError,
  BadRequestError,
  EchoStoreError,
  InternalError,
  LoadFailedError,
  PayloadTooLargeError,
  RouteNotFoundError,
  ShedError,
  UnauthorizedError,
  UnsupportedMediaTypeError,
} from '../errors.js';
import { WARN_WINDOW_MS, WarnLimiter } from '../warn-limiter.js';

/** The JSON body of every error answer. */
export interface ErrorBody {
  error: { code: string; message: string };
}

/** Longest message a client is sent, in characters: client input is never echoed beyond it. */
export const MAX_MESSAGE_CHARS = 200;

/** The `WWW-Authenticate` challenge of a 401 (RFC 6750 §3). */
export const BEARER_CHALLENGE = 'Bearer realm="echostore"';

/**
 * `text` cut to at most `maxChars` characters plus `…`, for quoting client
 * input in messages and logs. A cut never leaves half a surrogate pair.
 */
export function clip(text: string, maxChars = 100): string {
  return text.length <= maxChars ? text : `${text.slice(0, maxChars).toWellFormed()}…`;
}

/**
 * Maps anything thrown while serving a request to an {@link EchoStoreError}:
 * EchoStore errors pass through; fastify's own 4xx errors (body parsing,
 * schema validation, bad URL) become the matching client error with a fixed
 * message (fastify's messages quote the URL or the content type); anything
 * else is `ECC_INTERNAL`.
 */
export function toStoreError(err: unknown): EchoStoreError {
  if (err instanceof EchoStoreError) return err;
  const fe = err as Partial<FastifyError>;
  const status = typeof fe.statusCode === 'number' ? fe.statusCode : 500;
  const cause = { cause: err };
  switch (fe.code) {
    case 'FST_ERR_BAD_URL':
      return new BadIdError('the URL is not valid percent-encoded UTF-8', cause);
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return new BadIdError('a path segment is too long', cause);
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new BadRequestError('the JSON body is empty', cause);
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new BadRequestError(
        'the body is not valid JSON, or it sets __proto__ or constructor.prototype',
        cause,
      );
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new BadRequestError('the body does not match its Content-Length', cause);
  }
  if (status === 413) return new PayloadTooLargeError('request body is too large', cause);
  if (status === 415)
    return new UnsupportedMediaTypeError('send the body as application/json', cause);
  if (status >= 400 && status < 500) {
    // Schema validation messages ("body/ids must NOT have more than 1000 items") help the client.
    const message = typeof fe.message === 'string' ? fe.message : 'bad request';
    return new BadRequestError(message, cause);
  }
  return new InternalError('internal error', cause);
}

/**
 * The message a client is sent: a fixed text for a server-side failure (no
 * cause details), the error's own message for a client error, never longer
 * than {@link MAX_MESSAGE_CHARS}.
 */
export function publicMessage(e: EchoStoreError): string {
  return clip(e.publicMessage, MAX_MESSAGE_CHARS);
}

/** The body of the answer to `e`: `{ error: { code, message } }`, the message as {@link publicMessage}. */
export function errorBody(e: EchoStoreError): ErrorBody {
  return { error: { code: e.code, message: publicMessage(e) } };
}

const limiters = new WeakMap<FastifyInstance, WarnLimiter>();

/** The warn limiter of `app` (one per server), reporting repeats on the app's log. */
function limiterOf(app: FastifyInstance): WarnLimiter {
  let limiter = limiters.get(app);
  if (limiter === undefined) {
    limiter = new WarnLimiter((fields, repeats) =>
      app.log.warn(
        { ...fields, repeats },
        `${repeats} more ${String(fields.code)} answers of this kind in ${WARN_WINDOW_MS / 1000} s (logged at debug)`,
      ),
    );
    limiters.set(app, limiter);
  }
  return limiter;
}

/**
 * The kind of a cause, for {@link WarnLimiter}: its class, and its code and
 * status when it has them (`SourceError:ECC_SOURCE_FAILED:500`), never its
 * message (which may quote an id).
 */
function causeKind(cause: unknown): string | undefined {
  if (!(cause instanceof Error)) return cause === undefined ? undefined : typeof cause;
  const { code, status } = cause as { code?: unknown; status?: unknown };
  return [cause.name, code, status].filter((x) => x !== undefined).join(':');
}

/**
 * Logs an answered error by class: `ECC_INTERNAL` (a bug) at error level with
 * its stack, every time; other 5xx at warn with code, table, id (clipped) and
 * the cause's message, no stack — the first of its kind (code, table, kind of
 * cause) in each {@link WARN_WINDOW_MS}, the others at debug and counted in
 * one warning when the window closes (see {@link WarnLimiter}); 4xx (the
 * client's mistake) at debug. Headers are never logged.
 */
export function logAnswered(request: FastifyRequest, e: EchoStoreError): void {
  if (e.code === InternalError.code) {
    request.log.error({ err: e.cause ?? e, code: e.code }, e.message);
    return;
  }
  const fields = { code: e.code, table: e.table, id: e.id === undefined ? undefined : clip(e.id) };
  if (e.statusCode < 500) {
    request.log.debug(fields, clip(e.message, MAX_MESSAGE_CHARS));
    return;
  }
  const line = { ...fields, cause: causeMessage(e.cause) };
  const kind = { code: e.code, table: e.table, causeKind: causeKind(e.cause) };
  if (limiterOf(request.server).take(kind)) request.log.warn(line, e.message);
  else request.log.debug(line, e.message);
}

function causeMessage(cause: unknown): string | undefined {
  if (cause === undefined) return undefined;
  return clip(cause instanceof Error ? cause.message : String(cause), 500);
}

/**
 * Sends the coded JSON error answer, with `Retry-After` (seconds) on shedding
 * and on a source failure the store remembers (`ECC_LOAD_FAILED`),
 * and the Bearer challenge on a 401.
 */
export function sendError(
  request: FastifyRequest,
  reply: FastifyReply,
  err: unknown,
): FastifyReply {
  const e = toStoreError(err);
  logAnswered(request, e);
  const retryAfterMs =
    e instanceof ShedError || e instanceof LoadFailedError ? e.retryAfterMs : undefined;
  if (retryAfterMs !== undefined)
    reply.header('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))));
  if (e instanceof UnauthorizedError) reply.header('www-authenticate', BEARER_CHALLENGE);
  return reply.code(e.statusCode).type('application/json; charset=utf-8').send(errorBody(e));
}

/**
 * Installs the error and not-found handlers: every error is `{ error: { code, message } }`.
 * `onUnmatched` is called once each answer to a request no route matched has been sent,
 * whether the not-found handler or an earlier hook answered it (request metrics: routes
 * have their own hooks, see request-metrics.ts).
 */
export function installErrorHandlers(
  app: FastifyInstance,
  onUnmatched?: (request: FastifyRequest, reply: FastifyReply) => void,
): void {
  const watch = (request: FastifyRequest, reply: FastifyReply) => {
    if (onUnmatched !== undefined && request.is404) {
      reply.raw.once('finish', () => onUnmatched(request, reply));
    }
  };
  app.setErrorHandler((err, request, reply) => {
    watch(request, reply);
    return sendError(request, reply, err);
  });
  app.setNotFoundHandler((request, reply) => {
    watch(request, reply);
    return sendError(request, reply, routeNotFound(request));
  });
}

/** The 404 `ECC_ROUTE_NOT_FOUND` for a request no route matches. */
export function routeNotFound(request: FastifyRequest): RouteNotFoundError {
  return new RouteNotFoundError(`no route for ${request.method} ${clip(request.url)}`);
}
