/**
 * The access log: one line per answered request, off by default (a line costs
 * more than an L1 hit), and sampled: `sampleRate` 0.01 logs about one request
 * in a hundred.
 */
import type { FastifyInstance } from 'fastify';

/** Options of {@link installAccessLog}. */
export interface AccessLogOptions {
  /** Share of requests logged, 0 (none: the hook is not installed) to 1 (every one). */
  sampleRate: number;
  /** A uniform draw in [0, 1); default `Math.random`. */
  random?: () => number;
}

/**
 * Logs each sampled request at `info` when its answer has been sent:
 * `{ method, url, route, statusCode, responseTimeMs, remoteAddress }` (`route`, the pattern
 * matched, null when none did) with the message `request`. The URL is the one asked for (ids included);
 * the `authorization` header is never logged.
 *
 * @throws {TypeError} when `sampleRate` is not within [0, 1].
 */
export function installAccessLog(app: FastifyInstance, options: AccessLogOptions): void {
  const { sampleRate, random = Math.random } = options;
  if (!(sampleRate >= 0 && sampleRate <= 1)) {
    throw new TypeError('accessLog.sampleRate must be a number from 0 to 1');
  }
  if (sampleRate === 0) return;
  app.addHook('onResponse', (request, reply, done) => {
    if (sampleRate < 1 && random() >= sampleRate) return done();
    request.log.info(
      {
        method: request.method,
        url: request.url,
        route: request.routeOptions.url ?? null,
        statusCode: reply.statusCode,
        responseTimeMs: Math.round(reply.elapsedTime * 1000) / 1000,
        remoteAddress: request.ip,
      },
      'request',
    );
    done();
  });
}
