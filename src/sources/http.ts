/** The `http` source: GET a URL with the id in it; 200 JSON is the item, 404 is "not found". */
import { context, propagation } from '@opentelemetry/api';
import { Agent, fetch, type Response } from 'undici';
import { BadIdError, ConfigError, SourceError } from '../errors.js';
import { LoadResult, withPolicy } from '../store/load-result.js';
import { splitTags } from '../store/tags.js';
import type { Source } from './source.js';

/** Options of {@link httpSource}. */
export interface HttpSourceOptions {
  /**
   * An `http:` or `https:` URL containing `{id}`, replaced by the URL-encoded id on each GET.
   * It may not carry credentials (`user:password@`): send them in `headers`.
   */
  url: string;
  /** A GET slower than this fails, in milliseconds. Default 10,000. */
  timeoutMs?: number;
  /**
   * Extra request headers (e.g. `authorization`). `accept: application/json` is sent unless
   * set here. Names are HTTP tokens; values may not contain CR, LF or NUL.
   */
  headers?: Record<string, string>;
  /** Largest response body read, in bytes; a larger one fails the load. Default 8 MiB (8,388,608). */
  maxBodyBytes?: number;
}

/** Default of `timeoutMs`, ms. */
export const DEFAULT_HTTP_TIMEOUT_MS = 10_000;
/** How long an origin's 404 for an id that has a value is confirmed before it replaces it, ms (see `confirmNotFoundMs`). */
export const DEFAULT_HTTP_CONFIRM_NOT_FOUND_MS = 5_000;
/** Default of `maxBodyBytes`: 8 MiB. */
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;
const MAX_MAX_BODY_BYTES = 1024 * 1024 * 1024;
/** RFC 9110 `token`. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** A path segment WHATWG URL parsing treats as `.` or `..` (dot-segments, RFC 3986 §5.2.4). */
const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;

/**
 * A loader that GETs `url` with `{id}` replaced by `encodeURIComponent(id)`,
 * with undici's `fetch` over the source's own connection pool (redirects
 * refused), aborted by the flight's signal or after `timeoutMs`. `close()`
 * destroys that pool: its keep-alive connections are closed and a GET still
 * running fails with a {@link SourceError}. 200 → the parsed JSON body, read up to `maxBodyBytes`;
 * 404 → `undefined` (not found); a 200's `Surrogate-Key` (space-separated, the
 * Fastly / Varnish xkey convention) and `Cache-Tag` (comma-separated) headers
 * are the row's purge tags; the body is always read or cancelled, so no
 * connection is left hanging.
 *
 * The loader rejects with {@link BadIdError} `ECC_BAD_ID`, before any request,
 * for an id that is a dot-segment (`.`, `..`, `%2e`, `.%2E`, …), which URL
 * parsing would resolve to another path of the origin. It rejects with
 * {@link SourceError} on any other status (`status` set, and `retryAfterMs` when the
 * origin sent `Retry-After`), on a redirect, on a
 * 200 whose body is not JSON or is larger than `maxBodyBytes` (declared by
 * `content-length` or counted while reading), on a network error and on a
 * timeout; with the signal's reason when the flight aborts it.
 *
 * @param field - dotted path of these options in the configuration, used in error messages.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.url` when the URL has no `{id}` (or
 *   has it in the host or port), is not http/https or carries credentials, `<field>.timeoutMs` / `<field>.maxBodyBytes` when
 *   out of range, or `<field>.headers.<name>` for a header name that is not a token or a value
 *   with CR, LF or NUL.
 */
export function httpSource(options: HttpSourceOptions, field = 'source'): Source {
  const { url } = options;
  const timeoutMs = options.timeoutMs ?? DEFAULT_HTTP_TIMEOUT_MS;
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  if (!url.includes('{id}')) throw new ConfigError(`${field}.url: must contain {id}`);
  // The id may choose the path or the query, never the host or port: `http://{id}:80/` would let a
  // client send the loader anywhere.
  if ((/^[^:/?#]*:\/\/([^/?#]*)/.exec(url)?.[1] ?? '').includes('{id}')) {
    throw new ConfigError(`${field}.url: {id} must be in the path or query, not the host or port`);
  }
  let parsed: URL;
  try {
    parsed = new URL(url.replaceAll('{id}', 'id'));
  } catch {
    throw new ConfigError(`${field}.url: is not a valid URL`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new ConfigError(`${field}.url: must be an http or https URL`);
  }
  if (parsed.username !== '' || parsed.password !== '') {
    throw new ConfigError(
      `${field}.url: must not contain credentials (user:password@); send them in headers`,
    );
  }
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    throw new ConfigError(`${field}.timeoutMs: must be a positive integer (milliseconds)`);
  }
  if (!Number.isInteger(maxBodyBytes) || maxBodyBytes < 1 || maxBodyBytes > MAX_MAX_BODY_BYTES) {
    throw new ConfigError(`${field}.maxBodyBytes: must be an integer from 1 to 1 GiB (bytes)`);
  }
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    if (!HEADER_NAME.test(name)) {
      throw new ConfigError(`${field}.headers.${name}: is not a valid header name`);
    }
    if (typeof value !== 'string' || /[\r\n\0]/.test(value)) {
      throw new ConfigError(`${field}.headers.${name}: must be a string without CR, LF or NUL`);
    }
  }
  const headers = { accept: 'application/json', ...options.headers };
  // The source's own pool, so that close() can close its connections (the global one is shared).
  const agent = new Agent();
  let closed = false;

  const checkId = (id: string): void => {
    if (DOT_SEGMENT.test(id) || DOT_SEGMENT.test(encodeURIComponent(id))) {
      throw new BadIdError('id must not be a dot-segment (".", "..") for an http source', {
        id,
      });
    }
  };
  return {
    checkId,
    confirmNotFoundMs: DEFAULT_HTTP_CONFIRM_NOT_FOUND_MS,
    async load(id, { signal }) {
      checkId(id);
      const encoded = encodeURIComponent(id);
      const target = url.replaceAll('{id}', encoded);
      const { origin, pathname } = new URL(target);
      const shown = origin + pathname;
      const timeout = AbortSignal.timeout(timeoutMs);
      let response: Response;
      try {
        response = await fetch(target, {
          dispatcher: agent,
          headers: withTraceContext(headers),
          redirect: 'error',
          signal: AbortSignal.any([signal, timeout]),
        });
        if (response.status === 200) {
          const text = await readBody(response, maxBodyBytes, shown);
          const value = parseJson(text, shown);
          const tags = tagsOf(response);
          // A number JSON.parse may change (16 or more digits and dots in a row, a 3-digit
          // exponent: 12345678901234567890 → 12345678901234567000) is kept by storing the body as
          // sent (trimmed) instead of re-serialising it; a false positive (in a string) costs nothing.
          if (MAY_LOSE_NUMBERS.test(text)) {
            const policy = withPolicy(value, tags.length === 0 ? {} : { tags }).policy;
            return new LoadResult(value, policy, text.trim());
          }
          return tags.length === 0 ? value : withPolicy(value, { tags });
        }
      } catch (err) {
        if (signal.aborted) throw err;
        if (timeout.aborted) {
          throw new SourceError(`GET ${shown} timed out after ${timeoutMs} ms`, shown, {
            cause: err,
          });
        }
        if (err instanceof SourceError) throw err;
        const reason = networkReason(err).replaceAll(target, shown);
        throw new SourceError(`GET ${shown} failed: ${reason}`, shown, { cause: err });
      }
      await response.body?.cancel().catch(() => {});
      if (response.status === 404) return undefined;
      const retryAfterMs = retryAfter(response.headers.get('retry-after'), Date.now());
      throw new SourceError(`GET ${shown} answered ${response.status}`, shown, {
        status: response.status,
        ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
      });
    },
    close() {
      if (closed) return;
      closed = true;
      agent.destroy().catch(() => {});
    },
  };
}

/**
 * The body of a 200 as UTF-8 text, refused without reading when `content-length`
 * exceeds `maxBodyBytes`, and cancelled (closing the connection) as soon as the
 * bytes read exceed it.
 */
async function readBody(response: Response, maxBodyBytes: number, url: string): Promise<string> {
  const tooLarge = () =>
    new SourceError(`GET ${url} answered 200 with a body over ${maxBodyBytes} bytes`, url, {
      status: 200,
    });
  const declared = Number(response.headers.get('content-length') ?? Number.NaN);
  if (declared > maxBodyBytes) {
    await response.body?.cancel().catch(() => {});
    throw tooLarge();
  }
  if (response.body === null) return '';
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    if (bytes > maxBodyBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(value);
  }
  return new TextDecoder().decode(Buffer.concat(chunks));
}

/** RFC 9110's preferred HTTP-date: `Sun, 06 Nov 1994 08:49:37 GMT`. */
const IMF_FIXDATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;

/**
 * A `Retry-After` header (RFC 9110 §10.2.3: delay-seconds, or an HTTP-date) as
 * ms from `nowMs`; undefined when absent or unreadable, 0 for a date in the past.
 */

export function retryAfter(header: string | null, nowMs: number): number | undefined {
  if (header === null) return undefined;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // RFC 9110 §10.2.3: delay-seconds or an HTTP-date (IMF-fixdate); anything else
  // (`-5`, `1.5`, `3, 4`) is garbage, not a date Date.parse happens to accept.
  if (!IMF_FIXDATE.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

/** The purge tags of an answer: its `Surrogate-Key` and `Cache-Tag` headers, together. */
function tagsOf(response: Response): string[] {
  const surrogate = response.headers.get('surrogate-key');
  const cacheTag = response.headers.get('cache-tag');
  if (surrogate === null && cacheTag === null) return [];
  return splitTags(`${surrogate ?? ''} ${cacheTag ?? ''}`);
}

/** What undici says went wrong (its `TypeError: fetch failed` carries the reason in `cause`). */
function networkReason(err: unknown): string {
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof Error) return cause.message;
  return err instanceof Error ? err.message : String(err);
}

/** Text in which a number may not survive `JSON.parse` then `JSON.stringify` (DBL_DIG is 15). */
const MAY_LOSE_NUMBERS = /\d[\d.]{15}|[eE][+-]?\d{3}/;

/** A `__proto__` key, or a `constructor` key holding a `prototype`: what a PUT refuses too. */
class PoisonedKeyError extends Error {}

function refusePoisonedKeys(key: string, value: unknown): unknown {
  if (
    key === '__proto__' ||
    (key === 'constructor' &&
      typeof value === 'object' &&
      value !== null &&
      Object.hasOwn(value, 'prototype'))
  ) {
    throw new PoisonedKeyError();
  }
  return value;
}

/**
 * The body's value. As a PUT body (secure-json-parse), a body with a `__proto__` key or a
 * `constructor.prototype` is refused: stored, it would reach a client that merges it into an
 * object. The reviver runs only on a body that could spell one (a `\u` escape included).
 */
function parseJson(text: string, url: string): unknown {
  try {
    return JSON.parse(
      text,
      /__proto__|constructor|\\u/.test(text) ? refusePoisonedKeys : undefined,
    );
  } catch (err) {
    const why =
      err instanceof PoisonedKeyError
        ? 'that sets __proto__ or constructor.prototype'
        : 'that is not JSON';
    throw new SourceError(`GET ${url} answered 200 with a body ${why}`, url, {
      status: 200,
      cause: err,
    });
  }
}

/**
 * `headers` plus the active trace context as the registered propagator writes
 * it (`traceparent`, `tracestate` with the W3C one), so the origin's spans
 * join the read's trace. Without an SDK the propagator is a no-op and
 * `headers` is sent as is.
 */
function withTraceContext(headers: Record<string, string>): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return Object.keys(carrier).length === 0 ? headers : { ...headers, ...carrier };
}
