/**
 * Connection pools (a source's `makePool`) that count, at the database's door, what the source
 * asked and what the database answered: batching is judged by these, never the cache's counters.
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
export const countingPgPool = (count: PoolCount) => (config: pg.PoolConfig) => {
  const pool = new pg.Pool(config);
  pool.query = counting(count, pool.query.bind(pool), (r: pg.QueryResult) => r.rowCount ?? 0);
  return pool;
};

/** A `makePool` for `mysqlSource`: a mysql2 pool whose `execute` counts into `count`. */
export const countingMysqlPool = (count: PoolCount) => (config: mysql.PoolOptions) => {
  const pool = mysql.createPool(config);
  pool.execute = counting(count, pool.execute.bind(pool), (r: [unknown[]]) => r[0].length);
  return pool;
};

/** `run`, counting each call into `count.queries` and the rows of its result into `count.rows`. */
function counting<F, R>(count: PoolCount, run: F, rowsOf: (result: R) => number): F {
  const call = run as (...a: unknown[]) => Promise<R>;
  return (async (...a: unknown[]) => {
    count.queries++;
    const result = await call(...a);
    count.rows += rowsOf(result);
    return result;
  }) as F;
}
