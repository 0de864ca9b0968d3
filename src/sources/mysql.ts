/**
 * The `mysql` source (MySQL and MariaDB): one parametrised query on a bounded
 * `mysql2` pool, run as a server-side prepared statement. The query's one `?`
 * stands for the list of ids (`WHERE id IN (?)`); a batch of n ids runs it
 * with that `?` widened to n placeholders, rounded up to a power of two so
 * that few distinct statements are prepared.
 */
import mysql from 'mysql2/promise';
import { ConfigError } from '../errors.js';
import { DEMO_COUNT, demoProduct } from './demo.js';
import type { Source } from './source.js';
import {
  batchSource,
  checkColumns,
  checkSqlOptions,
  connectFailed,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_ID_COLUMN,
  DEFAULT_POOL_SIZE,
  idsOfRows,
  idsQueryFailed,
  reason,
  rowsById,
  type SqlSourceContext,
  type SqlSourceOptions,
  seedFailed,
  tableOf,
} from './sql.js';

/** The pool a source queries; tests and drills may wrap it (to count queries at the database's door). */
export type MysqlPool = Pick<mysql.Pool, 'execute' | 'end' | 'on'>;

/** Options of {@link mysqlSource}. */
export interface MysqlSourceContext extends SqlSourceContext {
  /** Builds the pool from its configuration. Default `mysql.createPool(config)`. */
  makePool?: (config: mysql.PoolOptions) => MysqlPool;
}

/** The URL schemes of a `mysql` source. */
export const MYSQL_SCHEMES = ['mysql:', 'mariadb:'] as const;

/**
 * Connects once to check the server and the query (it must prepare, run with
 * two probe ids in a read-only session, and return the `idColumn`), seeds the
 * demo table when asked, then opens a bounded pool (`poolSize` connections),
 * each session read-only with a statement timeout of `loadTimeoutMs`
 * (`max_statement_time` on MariaDB, `max_execution_time` on MySQL). `load` is
 * a batch of one; rows are matched to ids by the text of `idColumn`, so an id
 * the database matches only through its collation (another case, trailing
 * spaces) is "not found".
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.url` when the server
 *   cannot be reached or refuses the login, `<field>.query` when the query has
 *   not exactly one `?` (outside quotes and comments), does not prepare or
 *   run, writes, or lacks the id column; `<field>.idsQuery` when it does not
 *   run with a limit. With `idsQuery` the source has `listIds(limit)` (`warm.top`).
 */
export async function mysqlSource(
  options: SqlSourceOptions,
  context: MysqlSourceContext,
): Promise<Source> {
  const field = context.field ?? 'source';
  checkSqlOptions(options, field, MYSQL_SCHEMES);
  const idColumn = options.idColumn ?? DEFAULT_ID_COLUMN;
  const [before, after] = splitAtPlaceholder(options.query, field);
  const statementFor = (n: number) => `${before}${Array(n).fill('?').join(', ')}${after}`;
  const connection: mysql.ConnectionOptions = {
    uri: options.url.replace(/^mariadb:/, 'mysql:'),
    connectTimeout: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    // Exact numbers: BIGINT and DECIMAL as strings, as the postgres source answers them.
    supportBigNumbers: true,
    bigNumberStrings: true,
    multipleStatements: false,
  };
  const timeoutStatement = await check(options, connection, statementFor(2), idColumn, field);
  const settings = [`SET SESSION TRANSACTION READ ONLY`, timeoutStatement(context.loadTimeoutMs)];
  const config: mysql.PoolOptions = {
    ...connection,
    connectionLimit: options.poolSize ?? DEFAULT_POOL_SIZE,
    maxIdle: options.poolSize ?? DEFAULT_POOL_SIZE,
    idleTimeout: 30_000,
    enableKeepAlive: true,
  };
  const pool = context.makePool?.(config) ?? mysql.createPool(config);
  // Each new session: read-only, and the statement timeout (sent before any query of it).
  pool.on('connection', (conn) => {
    // The event hands over the core (callback) connection, whatever the typings say.
    const core = conn as unknown as { query(sql: string, done: (err: unknown) => void): void };
    for (const sql of settings) core.query(sql, () => {});
  });
  const table = tableOf(field);

  const queryMany = async (ids: readonly string[]) => {
    // Widened to a power of two by repeating the last id: at most log2(maxBatchSize) statements.
    let n = 1;
    while (n < ids.length) n *= 2;
    const values = Array.from({ length: n }, (_, i) => ids[Math.min(i, ids.length - 1)] as string);
    const [rows] = await pool.execute(statementFor(n), values);
    return rowsById(rows as Record<string, unknown>[], idColumn);
  };
  // MySQL coerces rather than refuses a bad value: no data exception to isolate.
  const source = batchSource(
    queryMany,
    () => false,
    table,
    () => pool.end(),
  );
  const { idsQuery } = options;
  if (idsQuery !== undefined) {
    source.listIds = async (limit) => {
      // The limit as text: MySQL's prepared LIMIT refuses a DOUBLE, which a JS number binds as.
      const [rows] = await pool.execute({ sql: idsQuery, rowsAsArray: true }, [String(limit)]);
      return idsOfRows(rows as unknown[][], field);
    };
  }
  return source;
}

/**
 * Checks the server and the query on one connection (seeding first when
 * asked); resolves with how to set the statement timeout on this server.
 */
async function check(
  options: SqlSourceOptions,
  connection: mysql.ConnectionOptions,
  probe: string,
  idColumn: string,
  field: string,
): Promise<(ms: number) => string> {
  let conn: mysql.Connection;
  try {
    conn = await mysql.createConnection(connection);
  } catch (err) {
    throw connectFailed(field, options.url, err);
  }
  try {
    const [version] = await conn.query('SELECT VERSION() AS v');
    const mariadb = /mariadb/i.test(String((version as { v: unknown }[])[0]?.v));
    if (options.seed === 'demo') await seedDemo(conn, field);
    await conn.query('SET SESSION TRANSACTION READ ONLY');
    let columns: string[];
    try {
      const [, fields] = await conn.execute(probe, ['', '']);
      columns = (fields ?? []).map((f) => f.name);
    } catch (err) {
      throw new ConfigError(`${field}.query: ${reason(err)}`, {
        field: `${field}.query`,
        cause: err,
      });
    }
    checkColumns(columns, idColumn, options.tagsColumn, field);
    if (options.idsQuery !== undefined) {
      // The server ignores a surplus parameter: count them on the prepared statement.
      let params = 0;
      try {
        const prepared = await conn.prepare(options.idsQuery);
        params = (prepared as unknown as { statement: { parameters: unknown[] } }).statement
          .parameters.length;
        await prepared.execute(['0']);
        await prepared.close();
      } catch (err) {
        throw idsQueryFailed(field, err);
      }
      if (params !== 1) throw idsQueryFailed(field, new Error(`it takes ${params} parameters`));
    }
    return mariadb
      ? (ms) => `SET SESSION max_statement_time = ${(ms / 1000).toFixed(3)}`
      : (ms) => `SET SESSION max_execution_time = ${Math.round(ms)}`;
  } finally {
    await conn.end().catch(() => {});
  }
}

/**
 * The query's text before and after its one `?` (outside quotes, backticks
 * and comments).
 *
 * @throws {ConfigError} naming `<field>.query` unless there is exactly one.
 */
export function splitAtPlaceholder(query: string, field: string): [string, string] {
  const at: number[] = [];
  for (let i = 0; i < query.length; i++) {
    const c = query[i];
    if (c === "'" || c === '"' || c === '`') {
      for (i++; i < query.length && query[i] !== c; i++) if (query[i] === '\\') i++;
    } else if (c === '-' && query[i + 1] === '-') {
      while (i < query.length && query[i] !== '\n') i++;
    } else if (c === '#') {
      while (i < query.length && query[i] !== '\n') i++;
    } else if (c === '/' && query[i + 1] === '*') {
      const end = query.indexOf('*/', i + 2);
      i = end < 0 ? query.length : end + 1;
    } else if (c === '?') at.push(i);
  }
  if (at.length !== 1) {
    throw new ConfigError(
      `${field}.query: must take the ids as one ? in a list, e.g. WHERE id IN (?) (it has ${at.length})`,
      { field: `${field}.query` },
    );
  }
  const i = at[0] as number;
  return [query.slice(0, i), query.slice(i + 1)];
}

/** Creates `products` with the demo catalog's rows when it is missing or empty, under a named lock. */
async function seedDemo(conn: mysql.Connection, field: string): Promise<void> {
  try {
    await conn.query("SELECT GET_LOCK('echostore demo seed', 30)");
    try {
      await conn.query(
        'CREATE TABLE IF NOT EXISTS products (id INT PRIMARY KEY, sku VARCHAR(16), ' +
          'name VARCHAR(64), category VARCHAR(32), price_cents INT, stock INT, description TEXT)',
      );
      const [rows] = await conn.query('SELECT EXISTS (SELECT 1 FROM products) AS seeded');
      if (Number((rows as { seeded: unknown }[])[0]?.seeded) !== 1) {
        for (let first = 1; first <= DEMO_COUNT; first += 1000) {
          const chunk = [];
          for (let id = first; id < first + 1000 && id <= DEMO_COUNT; id++) {
            chunk.push(demoProduct(id));
          }
          await conn.query('INSERT INTO products VALUES ?', [chunk]);
        }
      }
    } finally {
      await conn.query("SELECT RELEASE_LOCK('echostore demo seed')");
    }
  } catch (err) {
    throw seedFailed(field, err);
  }
}
