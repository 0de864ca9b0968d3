/**
 * Every failure EchoStore reports, one class each, with a stable `code` and the
 * HTTP status the API answers with. Callers and tests match on `code`, never on
 * message text.
 *
 * @packageDocumentation
 */

/** Fields every EchoStore error may carry. */
export interface EchoStoreErrorOptions {
  /** The table the failure concerns, when there is one. */
  table?: string;
  /** The item id the failure concerns, when there is one. */
  id?: string;
  /** The underlying error (loader rejection, Valkey error, parse error…). */
  cause?: unknown;
}

/**
 * Base class: `code` is stable across releases; `statusCode` is the HTTP
 * answer; a 5xx is answered with its class's `publicMessage` (the message and
 * cause, which may carry a loader's or Valkey's text, stay in the logs).
 */
export class EchoStoreError extends Error {
  static readonly code: string = 'ECC_INTERNAL';
  static readonly statusCode: number = 500;
  /** What a client is told for a 5xx of this class. */
  static readonly publicMessage: string = 'internal error';
  readonly code: string;
  readonly statusCode: number;
  readonly table: string | undefined;
  readonly id: string | undefined;

  constructor(message: string, options: EchoStoreErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    const ctor = this.constructor as typeof EchoStoreError;
    this.name = ctor.name;
    this.code = ctor.code;
    this.statusCode = ctor.statusCode;
    this.table = options.table;
    this.id = options.id;
  }

  /** What a client is told: the class's fixed text for a 5xx, else this error's own message. */
  get publicMessage(): string {
    if (this.statusCode < 500) return this.message;
    return (this.constructor as typeof EchoStoreError).publicMessage;
  }
}

/** The id is not 1–512 bytes of printable UTF-8, or does not match the table's `idPattern`. */
export class BadIdError extends EchoStoreError {
  static override readonly code = 'ECC_BAD_ID';
  static override readonly statusCode = 400;
}

/** The table name is not `[a-z0-9_-]{1,64}` or the table is not configured. */
export class UnknownTableError extends EchoStoreError {
  static override readonly code = 'ECC_UNKNOWN_TABLE';
  static override readonly statusCode = 404;
}

/** The source has no such item (possibly answered from the negative cache). */
export class NotFoundError extends EchoStoreError {
  static override readonly code = 'ECC_NOT_FOUND';
  static override readonly statusCode = 404;
}

/**
 * The loader rejected or threw; every waiter of that flight gets this same error, and so
 * does every caller of the id, fleet-wide, while the failure is remembered (`errorTtlMs`, or
 * the origin's `Retry-After` up to `maxErrorTtlMs`): `retryAfterMs` is what remains of that.
 */
export class LoadFailedError extends EchoStoreError {
  static override readonly code = 'ECC_LOAD_FAILED';
  static override readonly statusCode = 502;
  static override readonly publicMessage = 'the source failed to load the item';
  /**
   * How long the failure is remembered for the id, ms (the `Retry-After` answered, at least 1 s);
   * 0: not remembered, though the origin sent `Retry-After` (0, or more than maxErrorTtlMs 0
   * allows); undefined: not remembered.
   */
  readonly retryAfterMs: number | undefined;

  constructor(message: string, options: EchoStoreErrorOptions & { retryAfterMs?: number } = {}) {
    super(message, options);
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** Fields of a {@link SourceError}. */
export interface SourceErrorOptions extends EchoStoreErrorOptions {
  /** The HTTP status, when the origin answered. */
  status?: number;
  /** The origin's `Retry-After`, in ms from when it answered, when it sent one. */
  retryAfterMs?: number;
}

/**
 * The `http` source's origin failed a load: it answered neither a JSON 200 nor a 404, or
 * redirected, or sent a body that is not JSON or is over `maxBodyBytes`; or the GET failed on
 * the network or timed out. The message names the request by origin and path only: the query
 * string (where API keys live) is never in it.
 *
 * Never answered as such: the store hands it to every waiter as the `cause` of a
 * {@link LoadFailedError} (`ECC_LOAD_FAILED`), so that clients see no detail of the origin.
 */
export class SourceError extends EchoStoreError {
  static override readonly code = 'ECC_SOURCE_FAILED';
  static override readonly statusCode = 502;
  /** The HTTP status, when the origin answered. */
  readonly status: number | undefined;
  /** The URL requested, without its query string and fragment (origin + path). */
  readonly url: string;
  /** The origin's `Retry-After` (RFC 9110 §10.2.3), ms, when it sent one: how long the store remembers the failure (capped by `maxErrorTtlMs`). */
  readonly retryAfterMs: number | undefined;

  constructor(message: string, url: string, options: SourceErrorOptions = {}) {
    super(message, options);
    this.url = url;
    this.status = options.status;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** The loader returned a value that cannot be stored as JSON (BigInt, cycle, function, undefined inside a result…). */
export class BadValueError extends EchoStoreError {
  static override readonly code = 'ECC_BAD_VALUE';
  static override readonly statusCode = 502;
  static override readonly publicMessage =
    'the source returned a value that cannot be stored as JSON';
}

/**
 * The source gave a row tags beyond the bounds (more than 64, one longer than 128 bytes, or
 * one that is not visible ASCII without `|`): the load fails and nothing is cached, since a
 * row stored without its tags could not be purged by them.
 */
export class RowTagsError extends EchoStoreError {
  static override readonly code = 'ECC_BAD_ROW_TAGS';
  static override readonly statusCode = 502;
  static override readonly publicMessage = 'the source returned tags that cannot be stored';
  /** True when the row has no `tagsColumn` at all (the query does not return it for this row). */
  readonly missingColumn: boolean;

  constructor(message: string, options: EchoStoreErrorOptions & { missingColumn?: boolean } = {}) {
    super(message, options);
    this.missingColumn = options.missingColumn ?? false;
  }

  override get publicMessage(): string {
    return this.missingColumn
      ? "the source's row has no tags column (source.tagsColumn): check that the table's query returns it"
      : RowTagsError.publicMessage;
  }
}

/**
 * A purge is malformed: neither `tags` nor `all: true` (or both), no tag or more than 256, or a
 * tag beyond the bounds a row's tags keep (1–128 bytes of visible ASCII without `|`).
 */
export class BadPurgeError extends EchoStoreError {
  static override readonly code = 'ECC_BAD_PURGE';
  static override readonly statusCode = 400;
}

/** The load took longer than the table's `loadTimeoutMs`. */
export class LoadTimeoutError extends EchoStoreError {
  static override readonly code = 'ECC_LOAD_TIMEOUT';
  static override readonly statusCode = 504;
  static override readonly publicMessage = 'the source did not answer in time';
}

/** A caller waited `waitTimeoutMs` for the item's load (this instance's, or the lease holder's fill). */
export class WaitTimeoutError extends EchoStoreError {
  static override readonly code = 'ECC_WAIT_TIMEOUT';
  static override readonly statusCode = 504;
  static override readonly publicMessage = 'the item is being loaded and was not ready in time';
}

/** The table already runs `maxConcurrentLoads` loads; retry after `retryAfterMs`. */
export class ShedError extends EchoStoreError {
  static override readonly code = 'ECC_SHED';
  static override readonly statusCode = 503;
  static override readonly publicMessage = 'too many loads in progress; retry later';
  /** Suggested client back-off, in milliseconds (HTTP `Retry-After` is this in whole seconds, at least 1). */
  readonly retryAfterMs: number;

  constructor(message: string, options: EchoStoreErrorOptions & { retryAfterMs?: number } = {}) {
    super(message, options);
    this.retryAfterMs = options.retryAfterMs ?? 1000;
  }
}

/** The store is shutting down and takes no new work. */
export class ClosedError extends EchoStoreError {
  static override readonly code = 'ECC_CLOSED';
  static override readonly statusCode = 503;
  static override readonly publicMessage = 'the service is shutting down';
}

/** Valkey refused or did not answer a write that must not be skipped (PUT, DELETE). */
export class ValkeyUnavailableError extends EchoStoreError {
  static override readonly code = 'ECC_VALKEY_UNAVAILABLE';
  static override readonly statusCode = 503;
  static override readonly publicMessage = 'the cache is unavailable; nothing was written';
  /** False when the write was sent and not confirmed: it may or may not have been applied. */
  readonly notSent: boolean;

  constructor(message: string, options: EchoStoreErrorOptions & { notSent?: boolean } = {}) {
    super(message, options);
    this.notSent = options.notSent ?? true;
  }

  override get publicMessage(): string {
    return this.notSent
      ? ValkeyUnavailableError.publicMessage
      : 'the cache did not confirm the write; it may or may not have been applied';
  }
}

/** The request is malformed: a PUT body missing, not JSON or not storable; a batch read's ids missing or too many. */
export class BadRequestError extends EchoStoreError {
  static override readonly code = 'ECC_BAD_REQUEST';
  static override readonly statusCode = 400;
}

/** No route matches the method and path. */
export class RouteNotFoundError extends EchoStoreError {
  static override readonly code = 'ECC_ROUTE_NOT_FOUND';
  static override readonly statusCode = 404;
}

/** The request body is larger than `http.bodyLimitBytes`. */
export class PayloadTooLargeError extends EchoStoreError {
  static override readonly code = 'ECC_PAYLOAD_TOO_LARGE';
  static override readonly statusCode = 413;
}

/** Fields of a {@link ConfigError}. */
export interface ConfigErrorOptions extends EchoStoreErrorOptions {
  /**
   * The field at fault as a dotted path (`tables.products.leaseMs`, `valkey.url`), relative to
   * whatever the thrower was given; a caller that knows more of the path prefixes it.
   */
  field?: string;
}

/**
 * The configuration (file, environment or `createStore` options) is invalid; the message names
 * the field, and `field` holds it for code (never recover it from the message).
 */
export class ConfigError extends EchoStoreError {
  static override readonly code = 'ECC_BAD_CONFIG';
  static override readonly statusCode = 500;
  /** The field at fault as a dotted path, when the failure concerns one field. */
  readonly field: string | undefined;

  constructor(message: string, options: ConfigErrorOptions = {}) {
    super(message, options);
    this.field = options.field;
  }
}

/** Anything unexpected: a bug. Logged with its cause; the client sees only the code. */
export class InternalError extends EchoStoreError {
  static override readonly code = 'ECC_INTERNAL';
  static override readonly statusCode = 500;
}

/** The method is not allowed on this path (the `Allow` header lists the allowed ones). */
export class MethodNotAllowedError extends EchoStoreError {
  static override readonly code = 'ECC_METHOD_NOT_ALLOWED';
  static override readonly statusCode = 405;
}

/** A request body was sent with a content type other than `application/json`. */
export class UnsupportedMediaTypeError extends EchoStoreError {
  static override readonly code = 'ECC_UNSUPPORTED_MEDIA_TYPE';
  static override readonly statusCode = 415;
}

/** The request's header section (request line included) is larger than Node's `maxHeaderSize` (16 KiB by default). */
export class HeadersTooLargeError extends EchoStoreError {
  static override readonly code = 'ECC_HEADERS_TOO_LARGE';
  static override readonly statusCode = 431;
}

/** The request's `Expect` header asks for something other than `100-continue` (RFC 9110 §10.1.1). */
export class ExpectationFailedError extends EchoStoreError {
  static override readonly code = 'ECC_EXPECTATION_FAILED';
  static override readonly statusCode = 417;
}

/** The client did not send a complete request (headers, or the whole request) in time. */
export class RequestTimeoutError extends EchoStoreError {
  static override readonly code = 'ECC_REQUEST_TIMEOUT';
  static override readonly statusCode = 408;
}

/** An admin route was called without `Authorization: Bearer <token>` carrying the configured token. */
export class UnauthorizedError extends EchoStoreError {
  static override readonly code = 'ECC_UNAUTHORIZED';
  static override readonly statusCode = 401;
}

/**
 * Protected mode (after Redis's): no admin token is configured, so write and
 * admin routes answer loopback clients only, and this client is not one.
 */
export class ProtectedModeError extends EchoStoreError {
  static override readonly code = 'ECC_PROTECTED_MODE';
  static override readonly statusCode = 403;
}

/**
 * A batch read's answer reached `http.maxBatchBytes`: this id (and every later
 * one of the request) was not read; ask for it in another request.
 */
export class BatchTooLargeError extends EchoStoreError {
  static override readonly code = 'ECC_BATCH_TOO_LARGE';
  static override readonly statusCode = 413;
}
