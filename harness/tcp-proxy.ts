/**
 * A loopback TCP proxy for fault tests and drills: it forwards each connection to a target port,
 * and on purpose can freeze one (a peer behind a dead NAT: no FIN, no RST), hold its bytes and
 * deliver them later (a link that buffers rather than drops), cut its client side while the held
 * bytes still go on, and retarget new connections (as a DNS name does after a failover).
 */
import { connect, createServer, type Socket } from 'node:net';

/** A running proxy (see {@link startTcpProxy}). */
export type TcpProxy = Awaited<ReturnType<typeof startTcpProxy>>;

/** One proxied connection; `sent` is what the client sent so far (the first 64 KiB, as latin1). */
interface Connection {
  client: Socket;
  upstream: Socket;
  sent: string;
  frozen: boolean;
  /** Bytes from the client kept while holding; undefined while not holding. */
  held?: Buffer[] | undefined;
  /** The client side was cut: the upstream stays open for the held bytes, then ends. */
  cut: boolean;
  /** Resolves when the upstream has closed. */
  closed: Promise<void>;
}

const MAX_SENT_CHARS = 65_536;

/** Starts a proxy on a free loopback port, forwarding to `127.0.0.1:<targetPort>`. */
export async function startTcpProxy(targetPort: number) {
  let target = targetPort;
  const open = new Set<Connection>();
  const destroy = (c: Connection) => {
    c.client.destroy();
    c.upstream.destroy();
  };
  const server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    const closed = new Promise<void>((resolve) => upstream.once('close', () => resolve()));
    const c: Connection = { client, upstream, sent: '', frozen: false, cut: false, closed };
    open.add(c);
    client.on('data', (chunk: Buffer) => {
      if (c.sent.length < MAX_SENT_CHARS) c.sent += chunk.toString('latin1');
      if (c.held !== undefined) c.held.push(chunk);
      else if (!c.frozen) upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!c.frozen) client.write(chunk);
    });
    // Either side gone: the other goes too, unless frozen (a frozen peer says nothing) or cut
    // (the upstream lives on for the held bytes).
    const end = () => {
      if (c.frozen || c.cut) return;
      open.delete(c);
      destroy(c);
    };
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  /** The open connections whose client has sent `marker` (case-insensitive) and that `pick`s. */
  const matching = (marker: string, pick: (c: Connection) => boolean) =>
    [...open].filter((c) => pick(c) && c.sent.toLowerCase().includes(marker.toLowerCase()));
  return {
    /** `redis://127.0.0.1:<port>`. */
    url: `redis://127.0.0.1:${port}`,
    /**
     * Freezes every open connection whose client has sent `marker` (case-insensitive; e.g.
     * `SUBSCRIBE` finds subscriber connections): it reads nothing more from either side.
     *
     * @returns how many were frozen.
     */
    freeze(marker: string): number {
      const found = matching(marker, (c) => !c.frozen);
      for (const c of found) {
        c.frozen = true;
        c.client.pause();
        c.upstream.pause();
      }
      return found.length;
    },
    /**
     * Holds what the clients of every open connection whose client has sent `marker` send from
     * now on (kept, not forwarded; the server's answers still flow back), until `deliver`.
     *
     * @returns how many connections now hold.
     */
    hold(marker: string): number {
      const found = matching(marker, (c) => c.held === undefined);
      for (const c of found) c.held = [];
      return found.length;
    },
    /** The bytes held now, over every connection. */
    heldBytes: (): number =>
      [...open].reduce((n, c) => n + (c.held ?? []).reduce((m, b) => m + b.length, 0), 0),
    /**
     * Closes the client side of every holding connection: its client sees the connection lost
     * at once, while the bytes held for it still go on to the server at `deliver`.
     *
     * @returns how many were cut.
     */
    cut(): number {
      const found = [...open].filter((c) => c.held !== undefined && !c.cut);
      for (const c of found) {
        c.cut = true;
        c.client.destroy();
      }
      return found.length;
    },
    /**
     * Forwards every held byte, in the order it was sent, and stops holding; a cut connection's
     * upstream then ends, and the promise resolves once the server has closed every such one
     * (having run what it was sent). @returns the bytes delivered.
     */
    deliver(): { bytes: number; ran: Promise<void> } {
      let bytes = 0;
      const ended: Promise<void>[] = [];
      for (const c of open) {
        for (const chunk of c.held ?? []) {
          bytes += chunk.length;
          c.upstream.write(chunk);
        }
        c.held = undefined;
        if (c.cut) {
          c.upstream.end();
          ended.push(c.closed);
          open.delete(c);
        }
      }
      return { bytes, ran: Promise.all(ended).then(() => undefined) };
    },
    /** New connections go to `port` from now on; open ones keep their server. */
    retarget(port: number): void {
      target = port;
    },
    /** Closes every connection and the listener. */
    async close(): Promise<void> {
      for (const c of open) destroy(c);
      open.clear();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
