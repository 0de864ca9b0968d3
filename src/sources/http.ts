/** The `http` source: GET a URL with the id in it; 200 JSON is the item, 404 is "not found". */
import { ConfigError } from '../errors.js';
import type { Source } from './source.js';

/** Options of {@link httpSource}. */
export interface HttpSourceOptions {
  /** An `http:` or `https:` URL containing `{id}`, replaced by the URL-encoded id on each GET. */
  url: string;
  /** A GET slower than this fails, in milliseconds. Default 10,000. */
  timeoutMs?: number;
  /** Extra request headers (e.g. `authorization`). `accept: application/json` is sent unless set here. */
  headers?: Record<string, string>;
}

/** An answer of the origin that is neither a JSON 200 nor a 404, or a GET that timed out. */
export class SourceError extends Error {
  /** The HTTP status, when the origin answered. */
  readonly status: number | undefined;
  /** The URL requested. */
  readonly url: string;

  constructor(message: string, url: string, options: { status?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'SourceError';
    this.url = url;
    this.status = options.status;
  }
}

const DEFAULT_TIMEOUT_MS = 10_000;

/**
 * A loader that GETs `url` with `{id}` replaced by `encodeURIComponent(id)`,
 * using the global `fetch`, aborted by the flight's signal or after `timeoutMs`.
 * 200 → the parsed JSON body; 404 → `undefined` (not found); the body is
 * always read or cancelled, so no connection is left hanging.
 *
 * The loader rejects with {@link SourceError} on any other status (`status`
 * set), on a 200 whose body is not JSON, and on a timeout; with the signal's
 * reason when the flight aborts it; with fetch's `TypeError` on a network error.
 *
 * @param field - dotted path of these options in the configuration, used in error messages.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.url` when the URL has no `{id}` or is
 *   not http/https, or `<field>.timeoutMs` when it is not a positive integer.
 */
export function httpSource(options: HttpSourceOptions, field = 'source'): Source {
  const { url } = options;
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!url.includes('{id}')) throw new ConfigError(`${field}.url: must contain {id}`);
  let protocol: string;
  try {
    protocol = new URL(url.replaceAll('{id}', 'id')).protocol;
  } catch {
    throw new ConfigError(`${field}.url: is not a valid URL`);
  }
  if (protocol !== 'http:' && protocol !== 'https:') {
    throw new ConfigError(`${field}.url: must be an http or https URL`);
  }
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    throw new ConfigError(`${field}.timeoutMs: must be a positive integer (milliseconds)`);
  }
  const headers = { accept: 'application/json', ...options.headers };

  return {
    async load(id, { signal }) {
      const target = url.replaceAll('{id}', encodeURIComponent(id));
      const timeout = AbortSignal.timeout(timeoutMs);
      let response: Response;
      try {
        response = await fetch(target, { headers, signal: AbortSignal.any([signal, timeout]) });
        if (response.status === 200) return parseJson(await response.text(), target);
      } catch (err) {
        if (timeout.aborted && !signal.aborted) {
          throw new SourceError(`GET ${target} timed out after ${timeoutMs} ms`, target, {
            cause: err,
          });
        }
        throw err;
      }
      await response.body?.cancel().catch(() => {});
      if (response.status === 404) return undefined;
      throw new SourceError(`GET ${target} answered ${response.status}`, target, {
        status: response.status,
      });
    },
    close() {},
  };
}

function parseJson(text: string, url: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new SourceError(`GET ${url} answered 200 with a body that is not JSON`, url, {
      status: 200,
      cause: err,
    });
  }
}
