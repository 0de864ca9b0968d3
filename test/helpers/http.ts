/**
 * Raw HTTP/1.1 over a TCP socket, for requests `app.inject` cannot express:
 * a bogus method, a malformed Content-Length, a request line over Node's
 * header limit, a missing Host, requests pipelined in one write.
 */
import { connect } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { onTestFinished } from 'vitest';
import { buildServer } from '../../src/http/server.js';
import type { Store } from '../../src/index.js';

/** What the server wrote back on one connection. */
export interface RawAnswer {
  /** The status code of the first response, 0 when nothing came back. */
  status: number;
  /** Its headers, names lower-cased. */
  headers: Record<string, string>;
  /** Its body (de-chunked). */
  body: string;
  /** Whether the server closed the connection before `timeoutMs`. */
  closed: boolean;
}

/**
 * Sends `text` as is on a fresh connection to 127.0.0.1:`port` and reads
 * until the server closes it, or `timeoutMs` passes. Send `Connection: close`
 * for requests the server answers normally.
 */
export async function rawExchange(
  port: number,
  text: string,
  timeoutMs = 3_000,
): Promise<RawAnswer> {
  const { raw, closed } = await exchange(port, text, timeoutMs);
  return parseAnswer(raw.toString('utf8'), closed);
}

/** Sends `text` on a fresh connection and collects every byte until the server closes it or `timeoutMs` passes. */
function exchange(
  port: number,
  text: string,
  timeoutMs: number,
): Promise<{ raw: Buffer; closed: boolean }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let closed = false;
    const socket = connect(port, '127.0.0.1', () => socket.write(text, 'latin1'));
    const timer = setTimeout(() => socket.destroy(), timeoutMs);
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', () => {});
    socket.on('end', () => {
      closed = true;
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ raw: Buffer.concat(chunks), closed });
    });
  });
}

/** One request of {@link pipelinedExchange}. */
export interface RawRequest {
  method: string;
  path: string;
  /** Header lines besides `Host` (and the last request's `Connection: close`). */
  headers?: Record<string, string>;
}

/**
 * Sends `requests` pipelined, in one write on one connection (the last with
 * `Connection: close`), so the server parses and handles them in one tick, and
 * reads every answer. Answers are split by `Content-Length`; a HEAD's and a
 * 304's have no body.
 */
export async function pipelinedExchange(
  port: number,
  requests: readonly RawRequest[],
): Promise<RawAnswer[]> {
  const text = requests
    .map(({ method, path, headers = {} }, i) => {
      const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
      const close = i === requests.length - 1 ? 'Connection: close\r\n' : '';
      return `${method} ${path} HTTP/1.1\r\nHost: test\r\n${lines.join('')}${close}\r\n`;
    })
    .join('');
  const { raw, closed } = await exchange(port, text, 3_000);
  const answers: RawAnswer[] = [];
  let rest = raw;
  for (const { method } of requests) {
    const split = rest.indexOf('\r\n\r\n');
    if (split < 0) break;
    const head = parseAnswer(rest.subarray(0, split + 4).toString('latin1'), closed);
    const bodyless = method === 'HEAD' || head.status === 304 || head.status === 204;
    const length = bodyless ? 0 : Number(head.headers['content-length'] ?? 0);
    const body = rest.subarray(split + 4, split + 4 + length).toString('utf8');
    answers.push({ ...head, body });
    rest = rest.subarray(split + 4 + length);
  }
  return answers;
}

function parseAnswer(raw: string, closed: boolean): RawAnswer {
  const split = raw.indexOf('\r\n\r\n');
  if (split < 0) return { status: 0, headers: {}, body: '', closed };
  const [statusLine = '', ...lines] = raw.slice(0, split).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = raw.slice(split + 4);
  if (headers['transfer-encoding'] === 'chunked') body = dechunk(body);
  else if (headers['content-length'] !== undefined) {
    body = Buffer.from(body).subarray(0, Number(headers['content-length'])).toString('utf8');
  }
  return { status: Number(statusLine.split(' ')[1] ?? 0), headers, body, closed };
}

function dechunk(text: string): string {
  let out = '';
  let rest = text;
  for (;;) {
    const eol = rest.indexOf('\r\n');
    const size = Number.parseInt(rest.slice(0, eol), 16);
    if (eol < 0 || !(size > 0)) return out;
    out += rest.slice(eol + 2, eol + 2 + size);
    rest = rest.slice(eol + 2 + size + 2);
  }
}

/**
 * A ready fastify app (not listening) over `store`, silent, with the admin
 * token when given; closed when the test ends.
 */
export async function serveApp(store: Store, adminToken?: string): Promise<FastifyInstance> {
  const app = buildServer({
    store,
    logger: pino({ level: 'silent' }),
    ...(adminToken === undefined ? {} : { adminToken }),
  });
  onTestFinished(() => app.close());
  await app.ready();
  return app;
}
