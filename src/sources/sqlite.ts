/** The `sqlite` source: one parameterised query on a better-sqlite3 file. */
import Database from 'better-sqlite3';
import { ConfigError } from '../errors.js';
import { ensureDemoCatalog } from './demo.js';
import type { Source } from './source.js';

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
}

/** How the id is bound: as the one positional parameter, or as the named parameter `id`. */
type Binding = 'positional' | 'named';

/**
 * Opens `file` read-only and prepares `query` once; the loader returns the
 * query's first row as a plain object (column name → value), or `undefined`
 * when there is no row. SQLite errors at load time reject as they are
 * (the store reports them as `ECC_LOAD_FAILED`).
 *
 * The query runs synchronously on the event loop, so keep it to an indexed lookup.
 *
 * @param field - dotted path of these options in the configuration, used in error messages.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.file` when the file cannot be opened
 *   (or seeded), or `<field>.query` when the query does not compile, returns no rows, or does
 *   not take exactly one parameter, the id.
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
    const statement = db.prepare(options.query);
    if (!statement.reader) {
      throw new ConfigError(`${field}.query: must return rows (a SELECT)`);
    }
    const binding = probeBinding(db, options.query, `${field}.query`);
    return {
      // async: a failed query rejects like every source's load, never throws in the caller.
      async load(id, { signal }) {
        signal.throwIfAborted();
        return statement.get(binding === 'named' ? { id } : id);
      },
      close() {
        if (db.open) db.close();
      },
    };
  } catch (err) {
    db.close();
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`${field}.query: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Finds how the query takes the id by binding trial values to throwaway
 * statements (better-sqlite3 does not expose the parameter list).
 */
function probeBinding(db: Database.Database, query: string, field: string): Binding {
  const binds = (...args: unknown[]): boolean => {
    try {
      db.prepare(query).bind(...args);
      return true;
    } catch {
      return false;
    }
  };
  const expected = 'must take exactly one parameter, the id (`?`, `@id`, `:id` or `$id`)';
  if (binds()) throw new ConfigError(`${field}: ${expected}; it takes none`);
  if (binds('id')) return 'positional';
  if (binds({ id: 'id' })) return 'named';
  throw new ConfigError(`${field}: ${expected}`);
}
