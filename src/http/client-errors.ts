import { type IncomingMessage, type Server, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyBaseLogger } from 'fastify';
import {
  BadRequestError,
  type EchoStoreError,
  ExpectationFailedError,
  HeadersTooLargeError,
  MethodNotAllowedError,
  PayloadTooLargeError,
  RequestTimeoutError,
} from '../errors.js';
import { errorBody } from './errors.js';

/**
 * The coded error for each `clientError` Node's HTTP parser raises (llhttp
 * `HPE_*` codes, and Node's own header/request timeout).
 */
function clientErrorOf(parserCode: string | undefined): EchoStoreError {
  switch (parserCode) {
    case 'HPE_HEADER_OVERFLOW':
      return new HeadersTooLargeError('the request line and headers are larger than 16 KiB');
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new PayloadTooLargeError('chunk extensions are too large');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new RequestTimeoutError('the request was not received in time');
    default:
      return new BadRequestError('the request is not valid HTTP/1.1');
  }
}

/**
 * A complete HTTP/1.1 error answer, written straight to a socket: the coded
 * JSON body, `Connection: close`, and any `headers` given.
 */
export function rawErrorResponse(e: EchoStoreError, headers: Record<string, string> = {}): string {
  const text = JSON.stringify(errorBody(e));
  const lines = [
    `HTTP/1.1 ${e.statusCode} ${STATUS_CODES[e.statusCode] ?? 'Error'}`,
    'Content-Type: application/json; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(text)}`,
    'Connection: close',
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  return `${lines.join('\r\n')}\r\n\r\n${text}`;
}

/** The parts of a `clientError` this module reads (fastify's `ConnectionError`). */
interface ParserError {
  code?: string;
}

/**
 * fastify's `clientErrorHandler`: answers what Node's HTTP parser rejects
 * before any route runs (a bogus method, a malformed Content-Length, headers
 * over `maxHeaderSize`, a request that took too long) with the same coded
 * JSON as every other error, then destroys the socket: after a parse error
 * the rest of the byte stream cannot be trusted.
 *
 * Logs only the codes at debug level: the error's `rawPacket` holds the
 * request's bytes, `Authorization` included.
 */
export function answerClientError(err: ParserError, socket: Duplex, log: FastifyBaseLogger): void {
  // Reset by the peer or already closed: there is nobody to answer.
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const e = clientErrorOf(err.code);
  log.debug({ code: e.code, parserCode: err.code }, 'client error');
  // Responses to earlier requests on this connection (pipelined) may still be on
  // their way: a 400 written now would be taken as *their* answer (an HTTP/1.1
  // client pairs answers with requests in order). Let every one go out, then
  // answer the malformed request and close.
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    answerAndDestroy(socket, e);
    return;
  }
  const grace = setTimeout(() => socket.destroy(), IN_FLIGHT_GRACE_MS).unref();
  afterAnswers(socket as PipelinedSocket, (lastFinished) => {
    clearTimeout(grace);
    answerAndDestroy(socket, e, lastFinished);
  });
}

/** The parts of Node's connection state this module reads: the response that holds the socket. */
type PipelinedSocket = Duplex & {
  _httpMessage?: {
    headersSent?: boolean;
    /** Set by Node on the last answer it owes (the client half-closed, or asked to close). */
    _last?: boolean;
    req?: { complete?: boolean };
    once(e: string, f: () => void): void;
    prependOnceListener(e: string, f: () => void): void;
  } | null;
};

/**
 * Calls `then` once every response queued on `socket` has been sent. Node
 * hands the socket to the next queued response when one finishes (in its own
 * `finish` listener, which runs before this one), so each is waited for in
 * turn. A response whose request was not received in full is the malformed
 * request's own (its body broke the parser): `then` answers it instead.
 *
 * The last answer Node owes (`_last`: the client half-closed, or asked to
 * close) is different: Node's `finish` listener ends the socket, so `then` runs
 * just before it, with `lastFinished` true (that answer is sent, its socket
 * still open).
 */
function afterAnswers(socket: PipelinedSocket, then: (lastFinished: boolean) => void): void {
  const holder = socket._httpMessage;
  // Not `writableFinished`: an answer ended before its turn reads finished while
  // its bytes still wait; Node lets go of the socket only on its `finish`.
  if (holder == null || holder.req?.complete !== true) {
    then(false);
    return;
  }
  let called = false;
  holder.prependOnceListener('finish', () => {
    if (called || holder._last !== true) return;
    called = true;
    then(true);
  });
  const next = () => {
    if (called) return;
    called = true;
    afterAnswers(socket, then);
  };
  holder.once('finish', next);
  holder.once('close', next);
}

/**
 * Writes the coded error (unless an answer on the socket has begun) and closes
 * the connection once what was written has gone out: a `destroy()` now would
 * drop the earlier answers still in the socket's buffer.
 */
function answerAndDestroy(socket: Duplex, e: EchoStoreError, lastFinished = false): void {
  const holder = (socket as PipelinedSocket)._httpMessage;
  if (socket.writable && (lastFinished || holder?.headersSent !== true)) {
    socket.write(rawErrorResponse(e));
  }
  const soon = (socket as Duplex & { destroySoon?(): void }).destroySoon;
  if (typeof soon === 'function') soon.call(socket);
  else socket.destroy();
}

/** How long a response in flight on a connection with a malformed pipelined request may take before the connection is closed anyway, ms. */
const IN_FLIGHT_GRACE_MS = 30_000;

/**
 * Answers `CONNECT` (a tunnel request, which never reaches fastify's router)
 * with 405 `ECC_METHOD_NOT_ALLOWED`; the empty `Allow` says the target allows
 * no method (RFC 9110 §10.2.1). Without this Node closes the socket unanswered.
 */
export function answerConnect(socket: Duplex, log: FastifyBaseLogger): void {
  // Node hands the socket over without an error listener; a reset must not crash the process.
  socket.on('error', () => {});
  const e = new MethodNotAllowedError('CONNECT is not supported');
  log.debug({ code: e.code }, e.message);
  if (socket.writable) socket.write(rawErrorResponse(e, { Allow: '' }));
  socket.destroy();
}

/**
 * RFC 9110 §10.1.1: an `Expect` other than `100-continue` is 417. Node answers
 * it itself, with an empty body, unless the server listens for
 * `checkExpectation`: this answers 417 `ECC_EXPECTATION_FAILED` with the coded
 * JSON and closes the connection (the request's body, if any, is never read).
 */
export function answerExpectation(response: ServerResponse, log: FastifyBaseLogger): void {
  answerAndClose(
    response,
    new ExpectationFailedError('only "Expect: 100-continue" is supported'),
    log,
  );
}

/** Answers `e` with the coded JSON on a response no route has seen, closing the connection after it. */
function answerAndClose(response: ServerResponse, e: EchoStoreError, log: FastifyBaseLogger): void {
  log.debug({ code: e.code }, e.message);
  const text = JSON.stringify(errorBody(e));
  response.writeHead(e.statusCode, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    connection: 'close',
  });
  response.end(text);
}

/** How many `Host` lines `raw` (a request's `rawHeaders`: name, value, …) holds. */
export function hostLines(raw: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i] as string;
    if (name.length === 4 && name.toLowerCase() === 'host') n++;
  }
  return n;
}

/**
 * RFC 9112 §3.2: an HTTP/1.1 request without `Host`, and any request with more
 * than one `Host` line (Node keeps the first), is 400. Node's own check
 * (turned off with `requireHostHeader: false`) answers it with an empty body;
 * this wraps fastify's request listener to answer 400 `ECC_BAD_REQUEST` with
 * the coded JSON instead. Costs one property read per request.
 */
export function requireHost(server: Server, log: FastifyBaseLogger): void {
  const handlers = server.listeners('request') as ((
    request: IncomingMessage,
    response: ServerResponse,
  ) => void)[];
  server.removeAllListeners('request');
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    if (request.headers.host === undefined && request.httpVersion === '1.1') {
      answerAndClose(response, new BadRequestError('an HTTP/1.1 request needs a Host header'), log);
      return;
    }
    if (hostLines(request.rawHeaders) > 1) {
      answerAndClose(response, new BadRequestError('a request names one Host, not several'), log);
      return;
    }
    for (const handler of handlers) handler(request, response);
  });
}
