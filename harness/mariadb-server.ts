/**
 * A private MariaDB server owned by a test or a drill, in a fresh temp folder on a free loopback
 * port (the machine's shared server on 3306 is never touched); as root it runs as the `mysql` user.
 */
import { execFileSync, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { freePort } from './free-port.js';
import { asRoot, privateDir, settle, spawned, stopChild } from './spawn.js';

/** A private server the caller controls (see {@link startMariadb}). */
export type PrivateMariadb = Awaited<ReturnType<typeof startMariadb>>;

/**
 * Creates and starts a private server with `log_bin`, `binlog_format=ROW`,
 * `binlog_row_image=FULL` and a database `test`.
 *
 * @throws {Error} when the binaries are missing or the server does not answer within 60 s.
 */
export async function startMariadb() {
  const dataDir = privateDir('echostore-mariadb-', 'mysql');
  const user = asRoot() ? ['--user=mysql'] : [];
  const port = await freePort();
  const url = `mysql://root@127.0.0.1:${port}`;
  const install = [`--datadir=${dataDir}`, ...user, '--auth-root-authentication-method=normal'];
  const removed = () => rmSync(dataDir, { recursive: true, force: true });
  try {
    const options = { stdio: 'pipe', timeout: 120_000 } as const;
    execFileSync('mariadb-install-db', [...install, '--skip-test-db'], options);
  } catch (cause) {
    removed();
    throw new Error('mariadb-install-db failed (apt-get install -y mariadb-server)', { cause });
  }
  const argv = ['--no-defaults', `--datadir=${dataDir}`, ...user, `--port=${port}`];
  argv.push('--bind-address=127.0.0.1', `--socket=${join(dataDir, 'mysqld.sock')}`);
  argv.push(`--pid-file=${join(dataDir, 'mysqld.pid')}`, '--log-bin=binlog', '--server-id=1');
  argv.push('--binlog-format=ROW', '--binlog-row-image=FULL', '--skip-name-resolve');
  argv.push('--innodb-flush-log-at-trx-commit=2', '--sync-binlog=0');
  const child = spawned(spawn('mariadbd', argv, { stdio: 'ignore' }));
  const createTest = async (): Promise<true> => {
    const conn = await mysql.createConnection({ uri: url, connectTimeout: 1_000 });
    await conn.query('CREATE DATABASE IF NOT EXISTS test');
    await conn.end();
    return true;
  };
  const fail = (last: string) => `mariadbd did not answer: ${last}`;
  await settle(60_000, 100, createTest, fail, child).catch((err) => {
    removed();
    throw err;
  });
  return {
    /** `mysql://root@127.0.0.1:<port>/test` (root without a password). */
    url: `${url}/test`,
    /**
     * Kills the server and removes the data folder; harmless a second time (stopChild returns at
     * once for an exited child, and the removal is forced).
     */
    async stop(): Promise<void> {
      await stopChild(child);
      removed();
    },
  };
}
