/**
 * Connection pools for the `postgres` and `mysql` sources that count, at the
 * database's door, what the source asked and what the database answered: a
 * drill or a test judges batching by these counts, never by the cache's own
 * counters. Pass one as the source's `makePool`.
 */
import mysql from 'mysql2/promise';
import pg from 'pg';

/** What a source's pool sent and was answered. */
export interface PoolCount {
  /** Queries sent (counted when sent, whether they succeed or fail). */
  queries: number;
  /** Rows the database answered, over all queries. */
  rows: number;
}

/** A `makePool` for `postgresSource`: a `pg.Pool` whose `query` counts into `count`. */
export function countingPgPool(count: PoolCount): (config: pg.PoolConfig) => pg.Pool {
  return (config) => {
    const pool = new pg.Pool(config);
    const query = pool.query.bind(pool) as (...a: unknown[]) => Promise<pg.QueryResult>;
    pool.query = (async (...a: unknown[]) => {
      count.queries++;
      const result = await query(...a);
      count.rows += result.rowCount ?? 0;
      return result;
    }) as typeof pool.query;
    return pool;
  };
}

/** A `makePool` for `mysqlSource`: a mysql2 pool whose `execute` counts into `count`. */
export function countingMysqlPool(count: PoolCount): (config: mysql.PoolOptions) => mysql.Pool {
  return (config) => {
    const pool = mysql.createPool(config);
    const execute = pool.execute.bind(pool) as (...a: unknown[]) => Promise<[unknown[], unknown]>;
    pool.execute = (async (...a: unknown[]) => {
      count.queries++;
      const result = await execute(...a);
      count.rows += result[0].length;
      return result;
    }) as typeof pool.execute;
    return pool;
  };
}
