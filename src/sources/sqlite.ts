/** The `sqlite` source: one parameterised query on a better-sqlite3 file. */
import Database from 'better-sqlite3';
import { ConfigError } from '../errors.js';
import { ensureDemoCatalog } from './demo.js';
import type { Source } from './source.js';
import { checkColumns } from './sql.js';

/** Options of {@link sqliteSource}. */
export interface SqliteSourceOptions {
  /** Path of the SQLite file. Opened read-only; it must exist unless `seed` creates it. */
  file: string;
  /**
   * A query returning rows that takes exactly one parameter, the id: `?`, or
   * the named `@id` / `:id` / `$id`. The first row is the item; no row is "not found".
   */
  query: string;
  /** `'demo'`: create the demo catalog in `file` first, when it has no `products` table. */
  seed?: 'demo';
  /**
   * A query listing ids, most wanted first, that takes exactly one parameter,
   * the limit: `?`, or the named `@limit` / `:limit` / `$limit`. Each row's
   * first column is an id (text or integer). Gives the source `listIds`.
   */
  idsQuery?: string;
  /**
   * The column holding the row's purge tags: checked here (the query must return it); the
   * tags themselves are read by `withTagsColumn`.
   */
  tagsColumn?: string;
}

/** How the parameter is bound: as the one positional parameter, or by its name. */
type Binding = 'positional' | 'named';

/**
 * Opens `file` read-only and prepares `query` once; the loader returns the
 * query's first row as a plain object (column name → value), or `undefined`
 * when there is no row. SQLite errors at load time reject as they are
 * (the store reports them as `ECC_LOAD_FAILED`).
 *
 * The query runs synchronously on the event loop, so keep it to an indexed lookup.
 * With `idsQuery` the source also has `listIds(limit)`: the first column of
 * each row, as a string.
 *
 * @param field - dotted path of these options in the configuration, used in error messages.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.file` when the file cannot be opened
 *   (or seeded), or `<field>.query` (`<field>.idsQuery`) when the query does not compile,
 *   returns no rows, or does not take exactly one parameter, the id (the limit);
 *   `<field>.tagsColumn` when the query returns no such column.
 */
export function sqliteSource(options: SqliteSourceOptions, field = 'source'): Source {
  if (options.seed === 'demo') {
    try {
      ensureDemoCatalog(options.file);
    } catch (err) {
      throw new ConfigError(`${field}.file: cannot create the demo catalog in ${options.file}`, {
        cause: err,
      });
    }
  }
  let db: Database.Database;
  try {
    db = new Database(options.file, { readonly: true, fileMustExist: true });
  } catch (err) {
    throw new ConfigError(`${field}.file: cannot open ${options.file}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  try {
    const statement = prepareReader(db, options.query, `${field}.query`);
    const binding = probeBinding(db, options.query, `${field}.query`, 'id');
    checkColumns(
      statement.columns().map((c) => c.name),
      undefined,
      options.tagsColumn,
      field,
    );
    const source: Source = {
      // async: a failed query rejects like every source's load, never throws in the caller.
      async load(id, { signal }) {
        signal.throwIfAborted();
        return statement.get(binding === 'named' ? { id } : id);
      },
      close() {
        if (db.open) db.close();
      },
    };
    if (options.idsQuery !== undefined) {
      source.listIds = idLister(db, options.idsQuery, `${field}.idsQuery`);
    }
    return source;
  } catch (err) {
    db.close();
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`${field}.query: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * `query` prepared, when it only reads and returns rows.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `field` when it does not compile, or may write.
 */
function prepareReader(db: Database.Database, query: string, field: string): Database.Statement {
  let statement: Database.Statement;
  try {
    statement = db.prepare(query);
  } catch (err) {
    throw new ConfigError(`${field}: ${(err as Error).message}`, { cause: err });
  }
  // `readonly` too: a CTE in front of an UPDATE … RETURNING returns rows but writes.
  if (!statement.reader || !statement.readonly) {
    throw new ConfigError(`${field}: must only read and return rows (a SELECT)`);
  }
  return statement;
}

/** `listIds` over `query`: the first column of each row, as a string. */
function idLister(
  db: Database.Database,
  query: string,
  field: string,
): (limit: number) => Promise<string[]> {
  const statement = prepareReader(db, query, field);
  const binding = probeBinding(db, query, field, 'limit');
  const list = statement.raw(true);
  return async (limit) => {
    const rows = list.all(binding === 'named' ? { limit } : limit) as unknown[][];
    return rows.map(([id]) => {
      if (typeof id === 'string') return id;
      if (typeof id === 'number' || typeof id === 'bigint') return String(id);
      throw new ConfigError(`${field}: a row's first column is not text or an integer`, { field });
    });
  };
}

/**
 * Finds how the query takes its one parameter (`name`: `id` or `limit`) by
 * binding trial values to throwaway statements (better-sqlite3 does not
 * expose the parameter list).
 */
function probeBinding(
  db: Database.Database,
  query: string,
  field: string,
  name: 'id' | 'limit',
): Binding {
  const binds = (...args: unknown[]): boolean => {
    try {
      db.prepare(query).bind(...args);
      return true;
    } catch {
      return false;
    }
  };
  const expected = `must take exactly one parameter, the ${name} (\`?\`, \`@${name}\`, \`:${name}\` or \`$${name}\`)`;
  if (binds()) throw new ConfigError(`${field}: ${expected}; it takes none`);
  if (binds(1)) return 'positional';
  if (binds({ [name]: 1 })) return 'named';
  throw new ConfigError(`${field}: ${expected}`);
}
