/**
 * How the CLI talks to a running instance: its HTTP API, JSON both ways, the
 * admin token as a Bearer credential.
 */

/** Where the instance is, and the admin token, if any. */
export interface Remote {
  /** Base URL, e.g. `http://127.0.0.1:8080`. */
  url: string;
  token: string | undefined;
  /** Longest wait for an answer, ms. */
  timeoutMs: number;
}

/** The instance answered with a coded error (`{ error: { code, message } }`). */
export class RemoteError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** The server answered, but not as an EchoStore instance does (another service at that URL). */
export class NotEchoStoreError extends Error {
  constructor(url: string) {
    super(`${origin(url)} did not answer as an EchoStore instance`);
  }
}

/** A file a command was given cannot be read (a usage error). */
export class UnreadableFileError extends Error {}

/** A URL as it may be printed: scheme, host and port only (never credentials or a path). */
export function origin(url: string): string {
  return URL.canParse(url) ? new URL(url).origin : '<invalid url>';
}

/** The instance could not be reached (refused, timed out, not HTTP). */
export class UnreachableError extends Error {}

/**
 * Sends one request and returns its JSON body (`undefined` for a 204).
 *
 * @throws {RemoteError} for an answer of 400 or more.
 * @throws {UnreachableError} when no answer came within `timeoutMs`.
 */
export async function call(
  remote: Remote,
  method: 'GET' | 'POST' | 'DELETE',
  path: string,
  body?: unknown,
): Promise<unknown> {
  const headers: Record<string, string> = {};
  if (remote.token !== undefined) headers.authorization = `Bearer ${remote.token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response: Response;
  try {
    response = await fetch(under(remote.url, path), {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(remote.timeoutMs),
    });
  } catch (err) {
    // undici's "fetch failed" carries the socket's error as its cause (an AggregateError when
    // every address of the host refused): name that, not the TypeError around it.
    const cause = (err as { cause?: { code?: string; errors?: { code?: string }[] } }).cause;
    const why =
      cause?.code ??
      cause?.errors?.[0]?.code ??
      (cause as Error | undefined)?.message ??
      (err as Error).name;
    throw new UnreachableError(
      `cannot reach ${origin(remote.url)} (${why}): is the service running there? name another with --url or ECHOSTORE_URL`,
    );
  }
  let text: string;
  try {
    text = await response.text();
  } catch (err) {
    throw new UnreachableError(
      `${origin(remote.url)} stopped answering mid-body (${(err as Error).name})`,
    );
  }
  let json: unknown;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    throw new UnreachableError(
      `${origin(remote.url)} did not answer JSON (HTTP ${response.status})`,
    );
  }
  if (response.status >= 400) {
    const error = (json as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new RemoteError(
      response.status,
      error?.code ?? `HTTP_${response.status}`,
      error?.message ?? text,
    );
  }
  return json;
}

/**
 * `path` (absolute, `/v1/…`) under `base`'s path: `http://h/prefix/` and
 * `/v1/stats` give `http://h/prefix/v1/stats`, for an instance behind a proxy
 * that serves it under a prefix.
 */
export function under(base: string, path: string): URL {
  const url = new URL(base);
  url.pathname = url.pathname.replace(/\/+$/, '') + path;
  return url;
}

/** A command line the CLI refuses before it sends anything (exit 64, with the command's help). */
export class UsageError extends Error {}

/** `segment` percent-encoded; a usage error for `.` and `..` (`what` names it). */
function pathSegment(what: string, segment: string): string {
  // A URL client (WHATWG URL) resolves them as dot-segments, even percent-encoded: the request
  // would reach another route.
  if (segment === '.' || segment === '..') {
    throw new UsageError(
      `the ${what} "${segment}" cannot be sent in a URL path (it is a dot-segment)`,
    );
  }
  return encodeURIComponent(segment);
}

/**
 * `<prefix>/tables/<table>`, percent-encoded.
 * @throws UsageError for the table names `.` and `..`.
 */
export function tablePath(prefix: string, table: string): string {
  return `${prefix}/tables/${pathSegment('table', table)}`;
}

/**
 * `<prefix>/tables/<table>/items/<id>` with both parts percent-encoded.
 * @throws UsageError for the ids (or table names) `.` and `..`.
 */
export function itemPath(prefix: string, table: string, id: string): string {
  return `${tablePath(prefix, table)}/items/${pathSegment('id', id)}`;
}
