/**
 * The SQL servers of the tests and drills: PostgreSQL and MySQL/MariaDB, each
 * found once per file in this order — `ECHOSTORE_TEST_POSTGRES_URL` /
 * `ECHOSTORE_TEST_MYSQL_URL`; the local server this machine and CI run
 * (127.0.0.1:5432, user postgres, database test; 127.0.0.1:3306, root without
 * a password, database test); testcontainers when a Docker engine answers.
 * Each test makes its own schema (a MySQL database) and drops it.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import pg from 'pg';

const LOCAL_POSTGRES = 'postgres://postgres@127.0.0.1:5432/test';
const LOCAL_MYSQL = 'mysql://root@127.0.0.1:3306/test';

/** A server URL and how to stop what was started for it. */
export interface SqlServer {
  url: string;
  stop(): Promise<void>;
}

async function answers(check: () => Promise<void>): Promise<boolean> {
  try {
    await check();
    return true;
  } catch {
    return false;
  }
}

const pgAnswers = (url: string) =>
  answers(async () => {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
    await client.connect();
    await client.end();
  });

const mysqlAnswers = (url: string) =>
  answers(async () => {
    const conn = await mysql.createConnection({ uri: url, connectTimeout: 3_000 });
    await conn.end();
  });

/** Finds (or starts) a PostgreSQL server. */
export async function postgresServer(): Promise<SqlServer> {
  const url = process.env.ECHOSTORE_TEST_POSTGRES_URL || LOCAL_POSTGRES;
  if (await pgAnswers(url)) return { url, async stop() {} };
  return container(
    'postgres:15',
    5432,
    { POSTGRES_HOST_AUTH_METHOD: 'trust', POSTGRES_DB: 'test' },
    (h, p) => `postgres://postgres@${h}:${p}/test`,
  );
}

/** Finds (or starts) a MySQL or MariaDB server. */
export async function mysqlServer(): Promise<SqlServer> {
  const url = process.env.ECHOSTORE_TEST_MYSQL_URL || LOCAL_MYSQL;
  if (await mysqlAnswers(url)) return { url, async stop() {} };
  return container(
    'mariadb:10.11',
    3306,
    { MARIADB_ALLOW_EMPTY_ROOT_PASSWORD: '1', MARIADB_DATABASE: 'test' },
    (h, p) => `mysql://root@${h}:${p}/test`,
  );
}

async function container(
  image: string,
  port: number,
  env: Record<string, string>,
  urlOf: (host: string, port: number) => string,
): Promise<SqlServer> {
  try {
    const { GenericContainer, Wait } = await import('testcontainers');
    const started = await new GenericContainer(image)
      .withEnvironment(env)
      .withExposedPorts(port)
      .withWaitStrategy(Wait.forListeningPorts())
      .start();
    return {
      url: urlOf(started.getHost(), started.getMappedPort(port)),
      async stop() {
        await started.stop();
      },
    };
  } catch (err) {
    throw new Error(
      `These tests need ${image.split(':')[0]} on 127.0.0.1 (see test/helpers/sql.ts), its URL in ` +
        `ECHOSTORE_TEST_${image.startsWith('postgres') ? 'POSTGRES' : 'MYSQL'}_URL, or a Docker engine ` +
        `for testcontainers. (testcontainers said: ${(err as Error).message})`,
    );
  }
}

/** A name no other test uses: `es_<hex>`. */
export function uniqueSchema(): string {
  return `es_${randomBytes(5).toString('hex')}`;
}

/**
 * Runs `statements` on `url` in one session (PostgreSQL), for setting up and
 * tearing down a test's schema.
 */
export async function pgExec(url: string, ...statements: string[]): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const sql of statements) await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Runs `statements` on `url` in one session (MySQL/MariaDB). */
export async function mysqlExec(url: string, ...statements: string[]): Promise<void> {
  const conn = await mysql.createConnection({ uri: url, multipleStatements: false });
  try {
    for (const sql of statements) await conn.query(sql);
  } finally {
    await conn.end();
  }
}

/** `url` with its database (the path) replaced by `database`. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** `url` with a PostgreSQL `search_path`, so unqualified names resolve in `schema`. */
export function withSearchPath(url: string, schema: string): string {
  const u = new URL(url);
  u.searchParams.set('options', `-c search_path=${schema}`);
  return u.toString();
}
