/**
 * A private PostgreSQL server owned by a test or a drill, in a fresh temp folder on a free loopback
 * port (the machine's shared server on 5432 is never touched); as root every step runs as the
 * `postgres` user (initdb refuses root).
 */
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from './free-port.js';
import { asRoot, privateDir } from './spawn.js';

/** A private server the caller controls (see {@link startPostgres}). */
export type PrivatePostgres = Awaited<ReturnType<typeof startPostgres>>;

/** Runs a PostgreSQL binary of `pg_config --bindir`, as the `postgres` user when this process is root. */
function pgRun(bin: string, args: string[]): void {
  try {
    const path = join(execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim(), bin);
    const [file, argv] = asRoot()
      ? ['runuser', ['-u', 'postgres', '--', path, ...args]]
      : [path, args];
    execFileSync(file, argv, { stdio: 'pipe', timeout: 60_000 });
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim() ?? String(err);
    throw new Error(`${bin} failed (apt-get install -y postgresql): ${stderr}`, { cause: err });
  }
}

/**
 * Creates and starts a private server: trust authentication, `fsync=off` (a test's data is thrown
 * away; commits still write their WAL before they return, so `pg_current_wal_lsn()` after a commit
 * is past it), `wal_level=logical`, room for ten replication slots and WAL senders; `settings`:
 * extra `-c name=value` settings after those.
 *
 * @throws {Error} when the binaries are missing or the server does not start within 60 s.
 */
export async function startPostgres(options: { settings?: Record<string, string | number> } = {}) {
  const dataDir = privateDir('echostore-pg-', 'postgres');
  const port = await freePort();
  const settings = {
    ...{ port, listen_addresses: '127.0.0.1', unix_socket_directories: dataDir },
    ...{ wal_level: 'logical', max_wal_senders: 10, max_replication_slots: 10 },
    ...{ fsync: 'off', full_page_writes: 'off', ...options.settings },
  };
  const serverOptions = Object.entries(settings).map(([k, v]) => `-c ${k}=${v}`);
  try {
    pgRun('initdb', ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8']);
    const start = ['-D', dataDir, '-o', serverOptions.join(' '), '-l', join(dataDir, 'log')];
    pgRun('pg_ctl', [...start, '-w', '-t', '60', 'start']);
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  let stopped: Promise<void> | undefined;
  return {
    /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication). */
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    /**
     * Stops the server (fast shutdown) and removes the data folder; a second call returns the
     * first one's promise (pg_ctl runs once).
     */
    stop(): Promise<void> {
      stopped ??= (async () => {
        try {
          pgRun('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
        } catch {
          // The server died on its own: there is nothing to stop, only its folder to remove.
        }
        rmSync(dataDir, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
}
