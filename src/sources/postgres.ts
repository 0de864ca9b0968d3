/**
 * The `postgres` source: one parametrised query on a bounded `pg` pool, which
 * takes the ids as one array (`WHERE id = ANY($1)`), so a batch of misses is
 * one query and one id is the same query with one element.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
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
export type PostgresPool = Pick<pg.Pool, 'query' | 'connect' | 'end' | 'on'>;

/** Options of {@link postgresSource}. */
export interface PostgresSourceContext extends SqlSourceContext {
  /** Builds the pool from its configuration. Default `new pg.Pool(config)`. */
  makePool?: (config: pg.PoolConfig) => PostgresPool;
}

/** SQLSTATE class 22, data exception: a value the query cannot take (`'abc'` for an integer). */
const isDataError = (err: unknown) => /^22/.test(String((err as { code?: unknown })?.code));

/** The URL schemes of a `postgres` source. */
export const POSTGRES_SCHEMES = ['postgres:', 'postgresql:'] as const;

/**
 * Connects a bounded pool (`poolSize` connections, each read-only with
 * `statement_timeout` = `loadTimeoutMs`), seeds the demo table when asked,
 * then checks the query once before serving: it must compile, take exactly
 * one parameter of an array type, and return the `idColumn`. `loadMany` runs
 * it once for a batch (a named prepared statement per connection); `load` is
 * a batch of one. Rows are matched to ids by the text of `idColumn`; an id
 * with no row is "not found". A data exception caused by one id (`'abc'` for
 * an integer column) fails that id alone with `ECC_BAD_ID`.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `<field>.url` when the server
 *   cannot be reached or refuses the login, `<field>.query` when the query does
 *   not compile, writes, does not take one array parameter, or lacks the id
 *   column, `<field>.idsQuery` when it does not run with a limit; the pool is
 *   closed first. With `idsQuery` the source has `listIds(limit)` (`warm.top`).
 */
export async function postgresSource(
  options: SqlSourceOptions,
  context: PostgresSourceContext,
): Promise<Source> {
  const field = context.field ?? 'source';
  checkSqlOptions(options, field, POSTGRES_SCHEMES);
  const idColumn = options.idColumn ?? DEFAULT_ID_COLUMN;
  // pg lets the URL's parameters override the config's: its `options` are taken out and put first.
  const url = new URL(options.url);
  const urlOptions = url.searchParams.get('options') ?? '';
  url.searchParams.delete('options');
  const config: pg.PoolConfig = {
    connectionString: url.toString(),
    max: options.poolSize ?? DEFAULT_POOL_SIZE,
    connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    idleTimeoutMillis: 30_000,
    application_name: 'echostore',
    // Every session is read-only and bounded by the load timeout, on the server
    // (after the URL's own `options`, such as a search_path).
    options:
      `${urlOptions} -c default_transaction_read_only=on -c statement_timeout=${context.loadTimeoutMs}`.trim(),
  };
  const pool = context.makePool?.(config) ?? new pg.Pool(config);
  // An idle connection that dies is dropped by the pool; the next query opens another.
  pool.on('error', () => {});
  try {
    await check(pool, options, idColumn, field);
  } catch (err) {
    await pool.end().catch(() => {});
    throw err;
  }
  const statement = `echostore_${createHash('sha256').update(options.query).digest('hex').slice(0, 16)}`;
  const table = tableOf(field);

  const queryMany = async (ids: readonly string[]) => {
    const result = await pool.query({ name: statement, text: options.query, values: [ids] });
    return rowsById(result.rows, idColumn);
  };
  const source = batchSource(queryMany, isDataError, table, () => pool.end());
  const { idsQuery } = options;
  if (idsQuery !== undefined) {
    source.listIds = async (limit) => {
      const result = await pool.query({ text: idsQuery, values: [limit], rowMode: 'array' });
      return idsOfRows(result.rows as unknown[][], field);
    };
  }
  return source;
}

async function check(
  pool: PostgresPool,
  options: SqlSourceOptions,
  idColumn: string,
  field: string,
): Promise<void> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (err) {
    throw connectFailed(field, options.url, err);
  }
  const queryProblem = (problem: string, cause?: unknown) =>
    new ConfigError(`${field}.query: ${problem}`, { field: `${field}.query`, cause });
  try {
    if (options.seed === 'demo') await seedDemo(client, field);
    try {
      await client.query(`PREPARE echostore_check AS ${options.query}`);
    } catch (err) {
      throw queryProblem(reason(err), err);
    }
    const described = await client.query<{ types: string[] }>(
      "SELECT parameter_types::text[] AS types FROM pg_prepared_statements WHERE name = 'echostore_check'",
    );
    await client.query('DEALLOCATE echostore_check');
    const types = described.rows[0]?.types ?? [];
    if (types.length !== 1 || !types[0]?.endsWith('[]')) {
      throw queryProblem(
        `must take the ids as one array parameter, e.g. WHERE id = ANY($1) (it takes ${types.length === 0 ? 'none' : types.join(', ')})`,
      );
    }
    let result: pg.QueryResult;
    try {
      result = await client.query(options.query, [[]]);
    } catch (err) {
      throw queryProblem(reason(err), err);
    }
    checkColumns(
      result.fields.map((f) => f.name),
      idColumn,
      options.tagsColumn,
      field,
    );
    if (options.idsQuery !== undefined) {
      try {
        await client.query(options.idsQuery, [0]);
      } catch (err) {
        throw idsQueryFailed(field, err);
      }
    }
  } finally {
    client.release();
  }
}

/**
 * Creates `products` with the demo catalog's rows when it is missing or
 * empty, in one transaction under an advisory lock (several instances may
 * start at once).
 */
async function seedDemo(client: pg.PoolClient, field: string): Promise<void> {
  try {
    await client.query('BEGIN READ WRITE');
    await client.query("SELECT pg_advisory_xact_lock(hashtext('echostore demo seed'))");
    await client.query(
      'CREATE TABLE IF NOT EXISTS products (id integer PRIMARY KEY, sku text, name text, ' +
        'category text, price_cents integer, stock integer, description text)',
    );
    const { rows } = await client.query('SELECT EXISTS (SELECT 1 FROM products) AS seeded');
    if (rows[0]?.seeded !== true) {
      const columns: unknown[][] = [[], [], [], [], [], [], []];
      for (let id = 1; id <= DEMO_COUNT; id++) {
        demoProduct(id).forEach((v, i) => {
          columns[i]?.push(v);
        });
      }
      await client.query(
        'INSERT INTO products SELECT * FROM unnest($1::integer[], $2::text[], $3::text[], ' +
          '$4::text[], $5::integer[], $6::integer[], $7::text[])',
        columns,
      );
    }
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw seedFailed(field, err);
  }
}
