/**
 * Pipelined requests on one connection, in order (RFC 9112 §9.3.2: a server
 * may process pipelined requests in parallel only when they all have safe
 * methods). Node parses every pipelined request at once and hands each to the
 * router at once; its answers go out in order, but a `GET` sent behind a
 * `PUT` of the same item would be *handled* first and answer the old row.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** Methods that change nothing (RFC 9110 §9.2.1): they may run alongside each other. */
const SAFE = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);

/** The unsafe requests of one connection not yet answered: the count and when the last one ends. */
interface Unsafe {
  open: number;
  done: Promise<void>;
}

const UNSAFE: unique symbol = Symbol('echostore.unsafe');
type OrderedSocket = Socket & { [UNSAFE]?: Unsafe };

/** Resolves once `response` has been sent in full or its connection closed. */
function ended(response: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    if (response.writableFinished || response.destroyed) return resolve();
    response.once('finish', resolve);
    response.once('close', resolve);
  });
}

/** Resolves once `response` holds the socket: Node gives it over when every earlier response has been sent. */
function turn(response: ServerResponse): Promise<void> {
  if (response.socket !== null) return Promise.resolve();
  return new Promise((resolve) => {
    response.once('socket', () => resolve());
    response.once('close', () => resolve());
  });
}

/**
 * Wraps `server`'s request listeners so that, on one connection, an unsafe
 * request (PUT, DELETE, POST, …) is handled only after every request before
 * it has been answered, and any request after an unsafe one only once that
 * one has been answered. Safe requests with no unsafe one before them are
 * handed on at once, in parallel, as before (one property read each).
 *
 * Must be called after the listeners are installed (fastify installs its own
 * when the app is built).
 */
export function orderPipelined(server: Server): void {
  const handlers = server.listeners('request') as ((
    request: IncomingMessage,
    response: ServerResponse,
  ) => void)[];
  server.removeAllListeners('request');
  const dispatch = (request: IncomingMessage, response: ServerResponse) => {
    for (const handler of handlers) handler(request, response);
  };
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    const socket = request.socket as OrderedSocket;
    const unsafe = socket[UNSAFE];
    if (SAFE.has(request.method ?? '')) {
      if (unsafe === undefined || unsafe.open === 0) dispatch(request, response);
      else void unsafe.done.then(() => dispatch(request, response));
      return;
    }
    const state: Unsafe = unsafe ?? { open: 0, done: Promise.resolve() };
    socket[UNSAFE] = state;
    state.open++;
    // Its turn comes when every earlier answer has gone out (Node queues answers in order).
    const started = turn(response).then(() => dispatch(request, response));
    state.done = started
      .then(() => ended(response))
      .finally(() => {
        state.open--;
      });
  });
}
