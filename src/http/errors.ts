import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  BadIdError,
  BadRequestError,
  EchoStoreError,
  InternalError,
  PayloadTooLargeError,
  RouteNotFoundError,
  ShedError,
  UnauthorizedError,
  UnsupportedMediaTypeError,
} from '../errors.js';

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

/** How long the warn lines of one code and table are limited to one, ms. */
export const WARN_WINDOW_MS = 10_000;

/**
 * Limits repeated warn lines: of the answers with one code for one table, the
 * first in each {@link WARN_WINDOW_MS} window is a warning, the others are
 * counted and logged at debug, and the next warning says how many there were.
 * Under overload (every excess request shed, every write refused) the log
 * would otherwise grow with the very load the process cannot take, in the
 * process least able to afford it (after printk_ratelimit and journald's
 * rate limit). The counters count every answer.
 */
export class WarnLimiter {
  readonly #windows = new Map<string, { openedAt: number; repeats: number }>();
  readonly #windowMs: number;
  readonly #now: () => number;

  /** @param windowMs window length, ms; @param now clock, ms (tests inject one). */
  constructor(windowMs = WARN_WINDOW_MS, now: () => number = () => performance.now()) {
    this.#windowMs = windowMs;
    this.#now = now;
  }

  /**
   * Takes one answer of `key` (code and table).
   *
   * @returns `warn: true` for the first of its window, with `repeats`: how
   *   many were logged at debug since the last warning of `key` (0 when
   *   none); `warn: false` for the others.
   */
  take(key: string): { warn: boolean; repeats: number } {
    const now = this.#now();
    const window = this.#windows.get(key);
    if (window !== undefined && now - window.openedAt < this.#windowMs) {
      window.repeats++;
      return { warn: false, repeats: 0 };
    }
    // Dropped after a quiet window, so the map holds only the keys that are failing now.
    if (this.#windows.size > 1_000) this.#forgetQuiet(now);
    this.#windows.set(key, { openedAt: now, repeats: 0 });
    return { warn: true, repeats: window?.repeats ?? 0 };
  }

  #forgetQuiet(now: number): void {
    for (const [key, w] of this.#windows) {
      if (now - w.openedAt >= 2 * this.#windowMs) this.#windows.delete(key);
    }
  }
}

const limiters = new WeakMap<FastifyInstance, WarnLimiter>();

/** The warn limiter of `app` (one per server). */
function limiterOf(app: FastifyInstance): WarnLimiter {
  let limiter = limiters.get(app);
  if (limiter === undefined) {
    limiter = new WarnLimiter();
    limiters.set(app, limiter);
  }
  return limiter;
}

/**
 * Logs an answered error by class: `ECC_INTERNAL` (a bug) at error level with
 * its stack, every time; other 5xx at warn with code, table, id (clipped) and
 * the cause's message, no stack — the first of its code and table in each
 * {@link WARN_WINDOW_MS}, the others at debug (see {@link WarnLimiter}); 4xx
 * (the client's mistake) at debug. Headers are never logged.
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
  const { warn, repeats } = limiterOf(request.server).take(`${e.code} ${e.table ?? ''}`);
  const line = { ...fields, cause: causeMessage(e.cause) };
  if (!warn) request.log.debug(line, e.message);
  else if (repeats === 0) request.log.warn(line, e.message);
  else
    request.log.warn(
      { ...line, repeats },
      `${e.message} (and ${repeats} more ${e.code} answers for this table since the last such warning, logged at debug)`,
    );
}

function causeMessage(cause: unknown): string | undefined {
  if (cause === undefined) return undefined;
  return clip(cause instanceof Error ? cause.message : String(cause), 500);
}

/**
 * Sends the coded JSON error answer, with `Retry-After` (seconds) on shedding
 * and the Bearer challenge on a 401.
 */
export function sendError(
  request: FastifyRequest,
  reply: FastifyReply,
  err: unknown,
): FastifyReply {
  const e = toStoreError(err);
  logAnswered(request, e);
  if (e instanceof ShedError)
    reply.header('retry-after', String(Math.max(1, Math.ceil(e.retryAfterMs / 1000))));
  if (e instanceof UnauthorizedError) reply.header('www-authenticate', BEARER_CHALLENGE);
  return reply.code(e.statusCode).type('application/json; charset=utf-8').send(errorBody(e));
}

/** Installs the error and not-found handlers: every error is `{ error: { code, message } }`. */
export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err, request, reply) => sendError(request, reply, err));
  app.setNotFoundHandler((request, reply) =>
    sendError(
      request,
      reply,
      new RouteNotFoundError(`no route for ${request.method} ${clip(request.url)}`),
    ),
  );
}
