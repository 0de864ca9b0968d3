/**
 * A private PostgreSQL server owned by a test or a drill: `initdb` into a
 * fresh folder under the system's temp dir, `pg_ctl start` on a free loopback
 * port with `wal_level=logical` (the change stream needs it), `pg_ctl stop`
 * and the folder removed after. The binaries are Debian's PostgreSQL 15 ones,
 * found by `pg_config --bindir`. initdb refuses root, so as root every step
 * runs as the `postgres` user (`runuser`). The machine's shared server on 5432
 * is never touched.
 */
import { execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './free-port.js';

/** A private server the caller controls. */
export interface PrivatePostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication). */
  url: string;
  port: number;
  /** The data folder (removed by {@link PrivatePostgres.stop}). */
  dataDir: string;
  /** `pg_ctl stop -m immediate` then start again on the same port (a crash and a restart). */
  restart(): Promise<void>;
  /** Stops the server (fast shutdown) and removes the data folder; idempotent. */
  stop(): Promise<void>;
}

/** Options of {@link startPostgres}. */
export interface PrivatePostgresOptions {
  /** Extra `-c name=value` settings after the defaults. */
  settings?: Record<string, string | number>;
}

/** Folder of `initdb` and `pg_ctl` (`pg_config --bindir`). */
function binDir(): string {
  try {
    return execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
  } catch (err) {
    throw new Error('pg_config is not on the PATH (apt-get install -y postgresql)', {
      cause: err,
    });
  }
}

/** Runs a PostgreSQL binary as the `postgres` user when this process is root. */
function run(bin: string, args: string[]): void {
  const asRoot = process.getuid?.() === 0;
  const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
  execFileSync(file, argv, { stdio: 'pipe', timeout: 60_000 });
}

/**
 * Creates and starts a private server: trust authentication, `fsync=off`
 * (a test's data is thrown away; commits still write their WAL before they
 * return, so `pg_current_wal_lsn()` after a commit is past it), `wal_level=logical`, room for ten
 * replication slots and WAL senders.
 *
 * @throws {Error} when the binaries are missing or the server does not start within 60 s.
 */
export async function startPostgres(
  options: PrivatePostgresOptions = {},
): Promise<PrivatePostgres> {
  const bin = binDir();
  const dataDir = mkdtempSync(join(tmpdir(), 'echostore-pg-'));
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }));
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }));
    chownSync(dataDir, uid, gid);
  }
  const port = await freePort();
  const settings: Record<string, string | number> = {
    port,
    listen_addresses: '127.0.0.1',
    unix_socket_directories: dataDir,
    wal_level: 'logical',
    max_wal_senders: 10,
    max_replication_slots: 10,
    fsync: 'off',
    full_page_writes: 'off',
    ...options.settings,
  };
  const serverOptions = Object.entries(settings)
    .map(([k, v]) => `-c ${k}=${v}`)
    .join(' ');
  try {
    run(join(bin, 'initdb'), ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8']);
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${stderrOf(err)}`, { cause: err });
  }
  const pgCtl = join(bin, 'pg_ctl');
  const start = () =>
    run(pgCtl, [
      '-D',
      dataDir,
      '-o',
      serverOptions,
      '-l',
      join(dataDir, 'log'),
      '-w',
      '-t',
      '60',
      'start',
    ]);
  try {
    start();
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    throw new Error(`pg_ctl start failed: ${stderrOf(err)}`, { cause: err });
  }
  let stopped = false;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    async restart() {
      run(pgCtl, ['-D', dataDir, '-m', 'immediate', '-w', 'stop']);
      start();
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      try {
        run(pgCtl, ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
      } catch {
        // already stopped
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function stderrOf(err: unknown): string {
  const stderr = (err as { stderr?: Buffer }).stderr;
  return stderr === undefined ? String(err) : stderr.toString().trim();
}
