/**
 * The access log: one line per answered request, off by default (a line costs
 * more than an L1 hit), and sampled: `sampleRate` 0.01 logs about one request
 * in a hundred.
 */
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { Bindings, ChildLoggerOptions, Logger } from 'pino';

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

/**
 * A request's `request.log` that makes its pino child (bound to the request id)
 * only when it first logs a line. Without the access log most requests log
 * nothing, and a child per request cost as much as a tenth of an L1 hit over
 * HTTP (pino serialises its bindings when the child is made).
 */
class LazyRequestLogger {
  readonly #parent: FastifyBaseLogger;
  readonly #bindings: Bindings;
  readonly #options: ChildLoggerOptions;
  #child: FastifyBaseLogger | undefined;

  constructor(parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
  }

  #made(): FastifyBaseLogger {
    this.#child ??= this.#parent.child(this.#bindings, this.#options);
    return this.#child;
  }

  /**
   * Whether a line at `level` would be written: asked of the parent while no child exists and
   * the child would have the parent's level (no `level` option), so a line below the level
   * (a shed's at debug, under overload) makes no child at all.
   */
  #enabled(level: string): boolean {
    const asked = this.#child === undefined && this.#options.level === undefined;
    // A pino logger (the server's `loggerInstance`): fastify's type leaves the method out.
    const logger = (asked ? this.#parent : this.#made()) as unknown as Pick<
      Logger,
      'isLevelEnabled'
    >;
    return logger.isLevelEnabled(level);
  }

  get level(): string {
    return this.#child?.level ?? this.#parent.level;
  }

  set level(level: string) {
    this.#made().level = level;
  }

  fatal(...args: Parameters<FastifyBaseLogger['fatal']>): void {
    if (this.#enabled('fatal')) this.#made().fatal(...args);
  }
  error(...args: Parameters<FastifyBaseLogger['error']>): void {
    if (this.#enabled('error')) this.#made().error(...args);
  }
  warn(...args: Parameters<FastifyBaseLogger['warn']>): void {
    if (this.#enabled('warn')) this.#made().warn(...args);
  }
  info(...args: Parameters<FastifyBaseLogger['info']>): void {
    if (this.#enabled('info')) this.#made().info(...args);
  }
  debug(...args: Parameters<FastifyBaseLogger['debug']>): void {
    if (this.#enabled('debug')) this.#made().debug(...args);
  }
  trace(...args: Parameters<FastifyBaseLogger['trace']>): void {
    if (this.#enabled('trace')) this.#made().trace(...args);
  }
  silent(...args: Parameters<FastifyBaseLogger['silent']>): void {
    this.#made().silent(...args);
  }
  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#made().child(bindings, options);
  }
}

/**
 * fastify's `childLoggerFactory` for `sampleRate`: with the access log off, a
 * request's logger becomes a pino child only when something logs (errors,
 * warm-up); with it on, every sampled request logs, so the child is made at once
 * (fastify's own behaviour).
 */
export function requestLoggerFactory(
  sampleRate: number,
):
  | ((
      logger: FastifyBaseLogger,
      bindings: Bindings,
      options: ChildLoggerOptions,
    ) => FastifyBaseLogger)
  | undefined {
  if (sampleRate > 0) return undefined;
  return (logger, bindings, options) =>
    new LazyRequestLogger(logger, bindings, options) as unknown as FastifyBaseLogger;
}
