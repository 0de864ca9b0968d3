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
import { drillArgs, float, int, oneOf, runDrill, text, valkeyOption } from './lib/cli.js';
import { columns, p50p99 } from './lib/report.js';
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

/** What the database was asked and answered, counted at the pool. */
const counted: PoolCount = { queries: 0, rows: 0 };

/** A schema of `items(id, name)` with rows 1..ids, the source over it, and how to drop both. */
async function database(schema: string): Promise<{ source: Source; drop(): Promise<void> }> {
  const seconds = (args['latency-ms'] / 1000).toFixed(3);
  const options = { field: 'tables.batch.source', loadTimeoutMs: 4_000 };
  // The source's latency is on the server: one pause per query.
  const made = async (drop: () => Promise<void>, make: () => Promise<Source>) => {
    try {
      return { source: await make(), drop };
    } catch (err) {
      await drop();
      throw err;
    }
  };
  if (args.source === 'postgres') {
    const url = args['postgres-url'];
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query(`CREATE SCHEMA ${schema}`);
    await admin.query(`CREATE TABLE ${schema}.items (id integer PRIMARY KEY, name text)`);
    await admin.query(
      `INSERT INTO ${schema}.items SELECT i, 'item ' || i FROM generate_series(1, ${args.ids}) AS i`,
    );
    const drop = async () => {
      await admin.query(`DROP SCHEMA ${schema} CASCADE`);
      await admin.end();
    };
    return made(drop, () =>
      postgresSource(
        {
          url,
          query: `WITH pause AS (SELECT pg_sleep(${seconds})) SELECT items.id, items.name FROM ${schema}.items, pause WHERE items.id = ANY($1)`,
        },
        { ...options, makePool: countingPgPool(counted) },
      ),
    );
  }
  const url = new URL(args['mysql-url']);
  const admin = await mysql.createConnection({ uri: url.toString() });
  await admin.query(`CREATE DATABASE ${schema}`);
  await admin.query(`CREATE TABLE ${schema}.items (id INT PRIMARY KEY, name TEXT)`);
  const rows = Array.from({ length: args.ids }, (_, i) => [i + 1, `item ${i + 1}`]);
  await admin.query(`INSERT INTO ${schema}.items VALUES ?`, [rows]);
  const drop = async () => {
    await admin.query(`DROP DATABASE ${schema}`);
    await admin.end();
  };
  url.pathname = `/${schema}`;
  return made(drop, () =>
    mysqlSource(
      {
        url: url.toString(),
        query: `SELECT items.id, items.name FROM items, (SELECT SLEEP(${seconds}) AS s) AS pause WHERE items.id IN (?)`,
      },
      { ...options, makePool: countingMysqlPool(counted) },
    ),
  );
}

async function main() {
  const { readers, ids } = args;
  const schema = `es_drill_${randomBytes(4).toString('hex')}`;
  const table = `batch-${randomBytes(4).toString('hex')}`;
  const admin = await connectAdmin(args.valkey);
  const { source, drop } = await database(schema);
  const latenciesMs: number[] = [];
  let failures = 0;
  let wrongRows = 0;
  let batches = 0;
  let fills = 0;
  let coalesced = 0;
  try {
    const store = await createStore({
      valkey: args.valkey,
      tables: {
        [table]: {
          load: source.load,
          ...(source.loadMany === undefined ? {} : { loadMany: source.loadMany }),
          // Each id of a batch holds an admission slot: enough for all of them from the start.
          maxConcurrentLoads: Math.max(256, ids),
          initialConcurrentLoads: Math.max(16, ids),
          maxBatchSize: ids,
        },
      },
    });
    try {
      const t = store.table(table);
      await Promise.all(
        Array.from({ length: readers }, async (_, i) => {
          const id = String((i % ids) + 1);
          const started = performance.now();
          try {
            const r = await t.get(id);
            latenciesMs.push(performance.now() - started);
            if (!r.found || (r.value as { id: number }).id !== Number(id)) wrongRows++;
          } catch {
            failures++;
          }
        }),
      );
      const stats = t.stats();
      fills = stats.loads;
      coalesced = stats.coalesced;
      batches = (await store.registry.getSingleMetric('echostore_load_batches_total')?.get())
        ?.values[0]?.value as number;
    } finally {
      await store.close();
    }
  } finally {
    await source.close();
    await drop();
    await dropTable(admin, table);
    admin.disconnect();
  }
  return {
    drill: 'batch',
    source: args.source,
    readers,
    ids,
    sourceLatencyMs: args['latency-ms'],
    queries: counted.queries,
    rows: counted.rows,
    fills,
    batches,
    coalesced,
    wrongRows,
    failures,
    ...p50p99(latenciesMs, 1),
    pass: counted.queries <= 2 && counted.rows === ids && wrongRows === 0 && failures === 0,
  };
}

function render(r: Awaited<ReturnType<typeof main>>): string {
  const table = columns([
    ['readers', r.readers],
    ['distinct cold ids', r.ids],
    ['queries (counted at the pool)', `${r.queries}   (law: ≤ 2)`],
    ['rows the database answered', `${r.rows}   (law: ${r.ids})`],
    ['loads (ids loaded) / loadMany calls', `${r.fills} / ${r.batches}`],
    ['coalesced waiters', r.coalesced],
    ['readers given another row', `${r.wrongRows}   (law: 0)`],
    ['failed readers', `${r.failures}   (law: 0)`],
    ['latency p50', `${r.p50Ms} ms`],
    ['latency p99', `${r.p99Ms} ms`],
  ]);
  return `batch drill (${r.source}): ${r.readers} readers over ${r.ids} cold ids, ${r.sourceLatencyMs} ms per query\n${table}\n${r.pass ? 'PASS' : 'FAIL'}: the batching law ${r.pass ? 'holds' : 'is broken'}\n`;
}

runDrill('batch', args.json, main, render);
