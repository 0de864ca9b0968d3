/**
 * A loopback TCP proxy for fault tests and drills: it forwards each connection
 * to a target port, and on purpose it can
 * - **freeze** a connection: stop forwarding both ways while keeping both
 *   sockets open, which is what a peer behind a dead NAT or a hung proxy looks
 *   like (no FIN, no RST, nothing);
 * - **hold** a connection's bytes towards the server and later **deliver**
 *   them, in order: a link that buffers (a congested path, a retransmitting
 *   NAT) rather than drops, so a command the client gave up on still arrives;
 * - **retarget**: send new connections to another port, as a DNS name or a
 *   proxy does after a failover.
 */
import { connect, createServer, type Socket } from 'node:net';

/** One proxied connection. */
export interface ProxiedConnection {
  /** What the client sent so far (the first 64 KiB, as latin1), to find a connection by its commands. */
  readonly sent: string;
  readonly frozen: boolean;
}

/** A running proxy. */
export interface TcpProxy {
  port: number;
  /** `redis://127.0.0.1:<port>`. */
  url: string;
  /** Open connections, oldest first. */
  readonly connections: readonly ProxiedConnection[];
  /**
   * Freezes every open connection whose client has sent `marker`
   * (case-insensitive; e.g. `SUBSCRIBE` finds subscriber connections).
   *
   * @returns how many were frozen.
   */
  freeze(marker: string): number;
  /**
   * Holds what the clients of every open connection whose client has sent
   * `marker` send from now on (kept, not forwarded; the server's answers
   * still flow back), until {@link deliver}.
   *
   * @returns how many connections now hold.
   */
  hold(marker: string): number;
  /** Forwards every held byte, in the order it was sent, and stops holding. @returns the bytes delivered. */
  deliver(): number;
  /** New connections go to `port` from now on; open ones keep their server. */
  retarget(port: number): void;
  /** Closes every connection and the listener. */
  close(): Promise<void>;
}

const MAX_SENT_CHARS = 65_536;

class Connection implements ProxiedConnection {
  sent = '';
  frozen = false;
  /** Bytes from the client kept while holding; undefined while not holding. */
  held: Buffer[] | undefined;
  constructor(
    readonly client: Socket,
    readonly upstream: Socket,
  ) {}

  freeze(): void {
    this.frozen = true;
    // Read nothing more from either side (a FIN from the client stays unread too).
    this.client.pause();
    this.upstream.pause();
  }

  destroy(): void {
    this.client.destroy();
    this.upstream.destroy();
  }
}

/** Starts a proxy on a free loopback port, forwarding to `127.0.0.1:<targetPort>`. */
export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  let target = targetPort;
  const open = new Set<Connection>();
  const server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    const c = new Connection(client, upstream);
    open.add(c);
    client.on('data', (chunk: Buffer) => {
      if (c.sent.length < MAX_SENT_CHARS) c.sent += chunk.toString('latin1');
      if (c.held !== undefined) c.held.push(chunk);
      else if (!c.frozen) upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!c.frozen) client.write(chunk);
    });
    // Either side gone: the other goes too, unless frozen (a frozen peer says nothing).
    const end = () => {
      if (c.frozen) return;
      open.delete(c);
      c.destroy();
    };
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    get connections() {
      return [...open];
    },
    freeze(marker) {
      const m = marker.toLowerCase();
      let n = 0;
      for (const c of open) {
        if (!c.frozen && c.sent.toLowerCase().includes(m)) {
          c.freeze();
          n++;
        }
      }
      return n;
    },
    hold(marker) {
      const m = marker.toLowerCase();
      let n = 0;
      for (const c of open) {
        if (c.held === undefined && c.sent.toLowerCase().includes(m)) {
          c.held = [];
          n++;
        }
      }
      return n;
    },
    deliver() {
      let bytes = 0;
      for (const c of open) {
        if (c.held === undefined) continue;
        for (const chunk of c.held) {
          bytes += chunk.length;
          c.upstream.write(chunk);
        }
        c.held = undefined;
      }
      return bytes;
    },
    retarget(port) {
      target = port;
    },
    close: () =>
      new Promise((resolve) => {
        for (const c of open) c.destroy();
        open.clear();
        server.close(() => resolve());
      }),
  };
}
