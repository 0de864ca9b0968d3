/**
 * What the `postgres` and `mysql` sources share: their options, how rows are
 * matched to ids, how one bad id is kept from failing a whole batch, and how
 * a load gives up when its flight's signal is aborted.
 */
import { BadIdError, ConfigError } from '../errors.js';
import type { Source } from './source.js';

/** Options of a SQL source (`postgres` or `mysql`); durations in milliseconds. */
export interface SqlSourceOptions {
  /**
   * `postgres://user[:password]@host[:port]/database` or `mysql://…`. Never
   * repeated in error messages (it may hold a password).
   */
  url: string;
  /**
   * One SELECT that takes the ids as one list parameter and returns a row per
   * id it has: `… WHERE id = ANY($1)` (postgres) or `… WHERE id IN (?)` (mysql).
   */
  query: string;
  /** The column whose value (as text) is the row's id. Default `id`. */
  idColumn?: string;
  /**
   * The column holding the row's purge tags: checked at start (the query must return it);
   * the tags themselves are read by `withTagsColumn`.
   */
  tagsColumn?: string;
  /** Most connections open at once. Default 4. */
  poolSize?: number;
  /** A connection not established within this fails. Default 2,000 ms. */
  connectTimeoutMs?: number;
  /** `'demo'`: create the demo `products` table and its 10,000 rows first, if it is missing or empty. */
  seed?: 'demo';
  /**
   * A query listing ids, most wanted first, that takes one parameter, the
   * limit (`$1` on postgres, `?` on mysql): each row's first column is an id.
   * Gives the source `listIds` (`warm.top`).
   */
  idsQuery?: string;
}

/** What the store tells a source when it builds it. */
export interface SqlSourceContext {
  /** Dotted path of the source's options in the configuration, for error messages. Default `source`. */
  field?: string;
  /** The table's `loadTimeoutMs`: the statement timeout on the server. */
  loadTimeoutMs: number;
}

export const DEFAULT_ID_COLUMN = 'id';
export const DEFAULT_POOL_SIZE = 4;
export const DEFAULT_CONNECT_TIMEOUT_MS = 2_000;

/**
 * The rows as a map from id (the `idColumn` value as text) to row: the first
 * row of an id wins, an id with no row is absent ("not found").
 */
export function rowsById(rows: readonly Record<string, unknown>[], idColumn: string) {
  const byId = new Map<string, unknown>();
  for (const row of rows) {
    const id = row[idColumn];
    if (id === null || id === undefined) continue;
    const key = String(id);
    if (!byId.has(key)) byId.set(key, { ...row });
  }
  return byId;
}

/**
 * Loads `ids` with one query; when the database refuses the list because of
 * one value (a data exception: `'abc'` for an integer column, a number out of
 * range), asks again one id per query so that only the bad ids fail, each
 * with `ECC_BAD_ID`.
 *
 * @param isDataError whether a query error is about a value, not the query.
 */
async function loadIsolatingBadIds(
  ids: readonly string[],
  query: (ids: readonly string[]) => Promise<Map<string, unknown>>,
  isDataError: (err: unknown) => boolean,
  table: string | undefined,
): Promise<Map<string, unknown>> {
  try {
    return await query(ids);
  } catch (err) {
    if (!isDataError(err)) throw err;
    if (ids.length === 1) throw badId(ids[0] as string, err, table);
  }
  const answers = await Promise.all(
    ids.map((id) =>
      query([id]).then(
        (rows) => rows.get(id),
        (err: unknown) => {
          if (isDataError(err)) return badId(id, err, table);
          return err instanceof Error ? err : new Error(String(err));
        },
      ),
    ),
  );
  const byId = new Map<string, unknown>();
  ids.forEach((id, i) => {
    if (answers[i] !== undefined) byId.set(id, answers[i]);
  });
  return byId;
}

function badId(id: string, cause: unknown, table: string | undefined): BadIdError {
  return new BadIdError('id is not a valid value of the source\u2019s id column', {
    id,
    cause,
    ...(table === undefined ? {} : { table }),
  });
}

/** `promise`, or a rejection with the signal's reason as soon as it is aborted (the query itself runs on to its statement timeout). */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

/** The table name in a field such as `tables.products.source`, for error context. */
export function tableOf(field: string): string | undefined {
  return /^tables\.([^.]+)\./.exec(`${field}.`)?.[1];
}

/** A database URL as `host:port/database`, never with its user or password. */
function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}${u.port === '' ? '' : `:${u.port}`}${u.pathname}`;
  } catch {
    return '<invalid url>';
  }
}

/** Checks the options the schema cannot: a URL that parses, with the expected scheme. */
export function checkSqlOptions(
  options: SqlSourceOptions,
  field: string,
  schemes: readonly string[],
): void {
  let url: URL;
  try {
    url = new URL(options.url);
  } catch {
    throw new ConfigError(`${field}.url: is not a valid URL`, { field: `${field}.url` });
  }
  if (!schemes.includes(url.protocol)) {
    throw new ConfigError(
      `${field}.url: must be a ${schemes.map((s) => `${s}//`).join(' or ')} URL`,
      { field: `${field}.url` },
    );
  }
  if (url.pathname.length <= 1) {
    throw new ConfigError(`${field}.url: must name the database (…/database)`, {
      field: `${field}.url`,
    });
  }
}

/** The start-up error of a database that cannot be reached: names `<field>.url` (host, port and database only). */
export function connectFailed(field: string, url: string, err: unknown): ConfigError {
  return new ConfigError(`${field}.url: cannot connect to ${describeUrl(url)}: ${reason(err)}`, {
    field: `${field}.url`,
    cause: err,
  });
}

/** The start-up error of a demo catalog that could not be created: names `<field>.seed`. */
export function seedFailed(field: string, err: unknown): ConfigError {
  return new ConfigError(`${field}.seed: cannot create the demo catalog: ${reason(err)}`, {
    field: `${field}.seed`,
    cause: err,
  });
}

/**
 * Checks that the query's result `columns` include `idColumn`, by which rows are matched to ids,
 * and `tagsColumn` when one is set (a row without it could not be purged by its tags).
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.query` (`<field>.tagsColumn`), listing
 *   the columns it returns.
 */
export function checkColumns(
  columns: readonly string[],
  idColumn: string | undefined,
  tagsColumn: string | undefined,
  field: string,
): void {
  const returned = columns.length === 0 ? 'no columns' : columns.join(', ');
  if (idColumn !== undefined && !columns.includes(idColumn)) {
    throw new ConfigError(
      `${field}.query: returns no column "${idColumn}" (idColumn), by which rows are matched to ids; it returns ${returned}`,
      { field: `${field}.query` },
    );
  }
  if (tagsColumn !== undefined && !columns.includes(tagsColumn)) {
    throw new ConfigError(
      `${field}.tagsColumn: the query returns no column "${tagsColumn}"; it returns ${returned}`,
      { field: `${field}.tagsColumn` },
    );
  }
}

/**
 * The ids of `idsQuery`'s rows (each row an array, its first column the id):
 * text as is, integers as their decimal text; a row with no id is skipped.
 *
 * @throws {ConfigError} naming `<field>.idsQuery` when a first column is neither.
 */
export function idsOfRows(rows: readonly unknown[][], field: string): string[] {
  const ids: string[] = [];
  for (const [id] of rows) {
    if (id === null || id === undefined) continue;
    if (typeof id === 'string') ids.push(id);
    else if (typeof id === 'number' || typeof id === 'bigint') ids.push(String(id));
    else {
      throw new ConfigError(`${field}.idsQuery: a row's first column is not text or an integer`, {
        field: `${field}.idsQuery`,
      });
    }
  }
  return ids;
}

/** The start-up error of an `idsQuery` that does not run with a limit: names `<field>.idsQuery`. */
export function idsQueryFailed(field: string, err: unknown): ConfigError {
  return new ConfigError(
    `${field}.idsQuery: ${reason(err)} (it must take one parameter, the limit)`,
    { field: `${field}.idsQuery`, cause: err },
  );
}

/** The first line of a driver's message, clipped: enough to fix a query, no more. */
export function reason(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  const line = text.split('\n')[0] ?? '';
  return line.length > 300 ? `${line.slice(0, 300)}…` : line;
}

/**
 * A SQL source around its batch query: `load(id)` is a batch of one, each
 * batch isolates the ids the server refuses (`isDataError`) and honours its
 * signal, and `close()` ends the pool once, however often it is called.
 *
 * @param queryMany runs the source's query for `ids` (one round trip).
 * @param isDataError true for a server error about one id's value (Postgres'
 *   data exceptions); such an id fails alone with `ECC_BAD_ID`.
 * @param end closes the pool.
 */
export function batchSource(
  queryMany: (ids: readonly string[]) => Promise<Map<string, unknown>>,
  isDataError: (err: unknown) => boolean,
  table: string | undefined,
  end: () => Promise<void>,
): Source {
  let closed: Promise<void> | undefined;
  const loadMany = (ids: readonly string[], { signal }: { signal: AbortSignal }) => {
    signal.throwIfAborted();
    return abortable(loadIsolatingBadIds(ids, queryMany, isDataError, table), signal);
  };
  return {
    async load(id, ctx) {
      return (await loadMany([id], ctx)).get(id);
    },
    loadMany,
    close() {
      closed ??= end().catch(() => {});
      return closed;
    },
  };
}
