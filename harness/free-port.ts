/** Free TCP ports on the loopback interface, for servers the drills and tests start. */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';

/** Listens on 127.0.0.1:`port` (0: one the OS picks) and closes: the port, or undefined when taken. */
function tryPort(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(undefined));
    srv.listen(port, '127.0.0.1', () => {
      const { port: got } = srv.address() as { port: number };
      srv.close(() => resolve(got));
    });
  });
}

/** A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it; another process may take it first). */
export async function freePort(): Promise<number> {
  const port = await tryPort(0);
  if (port === undefined) throw new Error('no free port on 127.0.0.1');
  return port;
}

/** Lowest client port handed out: bus ports (+10000) stay below the kernel's ephemeral range (32768). */
const MIN_PORT = 11_000;
const MAX_PORT = 22_700;

/**
 * A port in 11000–22699 such that it and its cluster bus port (+10000) were free a moment ago,
 * not among `taken`.
 */
export async function freeClusterPort(taken: ReadonlySet<number> = new Set()): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = MIN_PORT + Math.floor(Math.random() * (MAX_PORT - MIN_PORT));
    if (taken.has(port) || taken.has(port + 10_000) || taken.has(port - 10_000)) continue;
    if ((await tryPort(port)) && (await tryPort(port + 10_000))) return port;
  }
  throw new Error(`no free port pair (p, p + 10000) in ${MIN_PORT}–${MAX_PORT}`);
}

/**
 * The TCP port process `pid` listens on (its first listening socket), read from Linux's /proc;
 * undefined while it listens on none, or once it has exited. A server started on port 0 is found
 * this way: a port picked free beforehand ({@link freePort}) may be taken by another process
 * (another test run's service) before the server listens, and then what answers there is not it.
 */
export function listeningPort(pid: number): number | undefined {
  let sockets: Set<string>;
  try {
    sockets = new Set(
      readdirSync(`/proc/${pid}/fd`).flatMap((fd) => {
        try {
          return [readlinkSync(`/proc/${pid}/fd/${fd}`)];
        } catch {
          return []; // closed since the listing
        }
      }),
    );
  } catch {
    return undefined; // exited
  }
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      // sl local_address rem_address st … inode: ADDR:PORT in hex, state 0A is LISTEN.
      const [, local, , state, , , , , , inode] = line.trim().split(/\s+/);
      if (state === '0A' && sockets.has(`socket:[${inode}]`)) {
        return Number.parseInt(local?.split(':')[1] ?? '', 16);
      }
    }
  }
  return undefined;
}
