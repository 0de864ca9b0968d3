/**
 * A TCP proxy in front of the test server that delays every chunk by
 * `delayMs` each way and counts round trips: a round trip starts each time a
 * connection sends after it last received (commands written together before
 * any answer arrives count once, however many segments carry them). A chunk
 * that is one lone `PING` (the subscriber's heartbeat, once a second) starts
 * none: it is not a round trip of the protocol a test counts.
 */
import { createServer, Socket } from 'node:net';
import { onTestFinished } from 'vitest';

/** A running proxy. */
export interface LatencyProxy {
  /** `redis://127.0.0.1:<port>` of the proxy. */
  url: string;
  /** Round trips started so far, summed over every connection. */
  roundTrips(): number;
  close(): Promise<void>;
}

/** `PING` alone, as RESP: what the subscriber's heartbeat sends. */
const LONE_PING = /^\*1\r\n\$4\r\nping\r\n$/i;

/** Starts a proxy to `target` (a `redis://host:port` URL), closed when the test ends. */
export async function latencyProxy(target: string, delayMs: number): Promise<LatencyProxy> {
  const { hostname, port } = new URL(target);
  let trips = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = new Socket();
    sockets.add(client);
    sockets.add(upstream);
    let answered = true;
    const later = (fn: () => void) => setTimeout(fn, delayMs);
    client.on('data', (chunk) => {
      if (LONE_PING.test(chunk.toString('latin1'))) {
        later(() => upstream.write(chunk));
        return;
      }
      if (answered) trips++;
      answered = false;
      later(() => upstream.write(chunk));
    });
    upstream.on('data', (chunk) =>
      later(() => {
        answered = true;
        client.write(chunk);
      }),
    );
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    upstream.connect(Number(port), hostname);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const proxyPort = typeof address === 'object' && address !== null ? address.port : 0;
  const close = () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    });
  onTestFinished(close);
  return { url: `redis://127.0.0.1:${proxyPort}`, roundTrips: () => trips, close };
}
