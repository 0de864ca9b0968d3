/**
 * A private MariaDB server owned by a test or a drill: `mariadb-install-db`
 * into a fresh folder under the system's temp dir, `mariadbd` on a free
 * loopback port with the row binlog on (the change stream needs it), killed
 * and the folder removed after. As root the server runs as the `mysql`
 * user. The machine's shared server on 3306 is never touched.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import mysql from 'mysql2/promise';
import { freePort } from './free-port.js';

/** A private server the caller controls. */
export interface PrivateMariadb {
  /** `mysql://root@127.0.0.1:<port>/test` (root without a password). */
  url: string;
  port: number;
  readonly process: ChildProcess;
  /** Kills the server and removes the data folder; idempotent. */
  stop(): Promise<void>;
}

/**
 * Creates and starts a private server with `log_bin`, `binlog_format=ROW`,
 * `binlog_row_image=FULL` and a database `test`.
 *
 * @throws {Error} when the binaries are missing or the server does not answer within 60 s.
 */
export async function startMariadb(): Promise<PrivateMariadb> {
  const dataDir = mkdtempSync(join(tmpdir(), 'echostore-mariadb-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'mysql'], { encoding: 'utf8' }));
    const gid = Number(execFileSync('id', ['-g', 'mysql'], { encoding: 'utf8' }));
    chownSync(dataDir, uid, gid);
  }
  const user = asRoot ? ['--user=mysql'] : [];
  try {
    execFileSync(
      'mariadb-install-db',
      [
        `--datadir=${dataDir}`,
        ...user,
        '--auth-root-authentication-method=normal',
        '--skip-test-db',
      ],
      { stdio: 'pipe', timeout: 120_000 },
    );
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    throw new Error('mariadb-install-db failed (apt-get install -y mariadb-server)', {
      cause: err,
    });
  }
  const port = await freePort();
  const child = spawn(
    'mariadbd',
    [
      '--no-defaults',
      `--datadir=${dataDir}`,
      ...user,
      `--port=${port}`,
      '--bind-address=127.0.0.1',
      `--socket=${join(dataDir, 'mysqld.sock')}`,
      `--pid-file=${join(dataDir, 'mysqld.pid')}`,
      '--log-bin=binlog',
      '--binlog-format=ROW',
      '--binlog-row-image=FULL',
      '--server-id=1',
      '--skip-name-resolve',
      '--innodb-flush-log-at-trx-commit=2',
      '--sync-binlog=0',
    ],
    { stdio: 'ignore' },
  );
  const url = `mysql://root@127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) {
      rmSync(dataDir, { recursive: true, force: true });
      throw new Error(`mariadbd exited with code ${child.exitCode}`);
    }
    try {
      const conn = await mysql.createConnection({ uri: url, connectTimeout: 1_000 });
      await conn.query('CREATE DATABASE IF NOT EXISTS test');
      await conn.end();
      break;
    } catch (err) {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        rmSync(dataDir, { recursive: true, force: true });
        throw new Error('mariadbd did not answer within 60 s', { cause: err });
      }
      await sleep(100);
    }
  }
  let stopped = false;
  return {
    url: `${url}/test`,
    port,
    process: child,
    async stop() {
      if (stopped) return;
      stopped = true;
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((ok) => child.once('exit', ok));
        child.kill('SIGKILL');
        await exited;
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
