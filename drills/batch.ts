/**
 * Batch-loading drill: R concurrent readers over N cold ids of a real PostgreSQL or MySQL
 * table → at most 2 queries and exactly N rows (counted at the pool). Usage and laws:
 * drills/README.md#batch.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { countingMysqlPool, countingPgPool, type PoolCount } from '../harness/counting-pools.js';
import { mysqlSource } from '../src/sources/mysql.js';
import { postgresSource } from '../src/sources/postgres.js';
import type { Source } from '../src/sources/source.js';
import { createStore } from '../src/store/store.js';
import { readMany, storeRead } from './lib/burst.js';
import { drillArgs, float, int, oneOf, runDrill, text, valkeyOption } from './lib/cli.js';
import { law, p50p99 } from './lib/report.js';
import { connectAdmin, dropTable } from './lib/store.js';

const args = drillArgs({
  readers: int(200, 1, 100_000),
  ids: int(50, 1, 1_000),
  source: oneOf('postgres', 'mysql'),
  'latency-ms': float(20, 0, 2_000),
  'postgres-url': text('postgres://postgres@127.0.0.1:5432/test'),
  'mysql-url': text('mysql://root@127.0.0.1:3306/test'),
  valkey: valkeyOption(),
});
const { readers, ids } = args;

/** What the database was asked and answered, counted at the pool. */
const counted: PoolCount = { queries: 0, rows: 0 };

/** A database's schema to drop, and the source over it. */
type Db = { source?: Source; drop(): Promise<void> };

/**
 * Creates a schema of `items(id, name)` with rows 1..ids (`db.drop` drops it), then the source
 * over it (`db.source`): its query pauses `--latency-ms` on the server, once per query.
 */
async function database(schema: string, db: Db): Promise<void> {
  const seconds = (args['latency-ms'] / 1000).toFixed(3);
  const options = { field: 'tables.batch.source', loadTimeoutMs: 4_000 };
  if (args.source === 'postgres') {
    const url = args['postgres-url'];
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query(`CREATE SCHEMA ${schema}`);
    db.drop = () => admin.query(`DROP SCHEMA ${schema} CASCADE`).then(() => admin.end());
    await admin.query(`CREATE TABLE ${schema}.items (id integer PRIMARY KEY, name text)`);
    await admin.query(
      `INSERT INTO ${schema}.items SELECT i, 'item ' || i FROM generate_series(1, ${ids}) AS i`,
    );
    const query = `WITH pause AS (SELECT pg_sleep(${seconds})) SELECT items.id, items.name FROM ${schema}.items, pause WHERE items.id = ANY($1)`;
    const makePool = countingPgPool(counted);
    db.source = await postgresSource({ url, query }, { ...options, makePool });
    return;
  }
  const url = new URL(args['mysql-url']);
  const admin = await mysql.createConnection({ uri: url.toString() });
  await admin.query(`CREATE DATABASE ${schema}`);
  db.drop = () => admin.query(`DROP DATABASE ${schema}`).then(() => admin.end());
  await admin.query(`CREATE TABLE ${schema}.items (id INT PRIMARY KEY, name TEXT)`);
  const rows = Array.from({ length: ids }, (_, i) => [i + 1, `item ${i + 1}`]);
  await admin.query(`INSERT INTO ${schema}.items VALUES ?`, [rows]);
  url.pathname = `/${schema}`;
  const query = `SELECT items.id, items.name FROM items, (SELECT SLEEP(${seconds}) AS s) AS pause WHERE items.id IN (?)`;
  const makePool = countingMysqlPool(counted);
  db.source = await mysqlSource({ url: url.toString(), query }, { ...options, makePool });
}

runDrill('batch', args.json, async () => {
  const table = `batch-${randomBytes(4).toString('hex')}`;
  const admin = await connectAdmin(args.valkey);
  const db: Db = { drop: async () => {} };
  try {
    await database(`es_drill_${randomBytes(4).toString('hex')}`, db);
    const { load, loadMany } = db.source as Source;
    // Each id of a batch holds an admission slot: enough for all of them from the start.
    const [maxConcurrentLoads, initialConcurrentLoads] = [Math.max(256, ids), Math.max(16, ids)];
    const policy = { load, ...(loadMany && { loadMany }), maxBatchSize: ids };
    const tables = { [table]: { ...policy, maxConcurrentLoads, initialConcurrentLoads } };
    const store = await createStore({ valkey: args.valkey, tables });
    const t = store.table(table);
    const r = await readMany(storeRead(t), (i) => String((i % ids) + 1), readers);
    const wrong = (id: string, json: string) =>
      (JSON.parse(json) as { id?: number }).id !== Number(id);
    const wrongIds = Object.entries(r.answers).filter(([id, a]) => a.some((j) => wrong(id, j)));
    const { loads, coalesced } = t.stats();
    await store.close();
    const latency = p50p99(r.latenciesMs, 1);
    return {
      title: `batch drill (${args.source}): ${readers} readers over ${ids} cold ids, ${args['latency-ms']} ms per query`,
      figures: {
        'readers / distinct cold ids': `${readers} / ${ids}`,
        'loads (ids loaded)': loads,
        'coalesced waiters': coalesced,
        'latency p50 / p99': `${latency.p50Ms} / ${latency.p99Ms} ms`,
      },
      checks: [
        law('queries (counted at the pool)', counted.queries, '≤ 2', counted.queries <= 2),
        law('rows the database answered', counted.rows, ids),
        law('ids answered with another row', wrongIds.length, 0),
        law('failed readers', r.failures, 0),
      ],
    };
  } finally {
    await db.source?.close();
    await db.drop();
    await dropTable(admin, table);
    admin.disconnect();
  }
});
