/** Free TCP ports on the loopback interface, for servers the drills and tests start. */
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
