import { METHODS } from 'node:http';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import type { Logger } from 'pino';
import type { ReadAfter } from '../changes/read-your-writes.js';
import type { Store } from '../store/store.js';
import { installAccessLog, requestLoggerFactory } from './access-log.js';
import { adminOnly } from './auth.js';
import { batchRoutes } from './batch.js';
import {
  answerClientError,
  answerConnect,
  answerExpectation,
  requireHost,
} from './client-errors.js';
import { installErrorHandlers, sendError } from './errors.js';
import { inspectRoutes } from './inspect.js';
import { ITEM_PATH, itemRoutes } from './items.js';
import { installJsonBodyParser } from './json-body.js';
import { answerL1Hits } from './l1-hits.js';
import { installOpenApi, openApiRoute } from './openapi.js';
import { type Lifecycle, opsRoutes } from './ops.js';
import { orderPipelined } from './pipeline.js';
import { purgeRoutes } from './purge.js';
import { installRequestMetrics } from './request-metrics.js';
import { statusRoutes } from './status-page.js';
import { warmRoutes } from './warm.js';

/** Options of {@link buildServer}. */
export interface ServerOptions {
  store: Store;
  logger: Logger;
  /** Largest accepted request body, bytes. Default 1 MiB. */
  bodyLimitBytes?: number;
  /**
   * Largest batch-read answer, UTF-16 characters of its items' JSON: past it,
   * each id not yet sent is answered `ECC_BATCH_TOO_LARGE` (413) in its item,
   * unread. Default 64 MiB.
   */
  maxBatchBytes?: number;
  /** A request not received in full within this is answered 408 `ECC_REQUEST_TIMEOUT`, ms. Default 30,000. */
  requestTimeoutMs?: number;
  /**
   * When set, PUT and DELETE on items, `POST /v1/tables/:table/warm` and `POST /v1/tables/:table/purge` need
   * `Authorization: Bearer <adminToken>` (else 401 `ECC_UNAUTHORIZED`). Reads,
   * `/v1/tables`, `/metrics`, `/healthz` and `/readyz` stay open. A non-empty
   * string without whitespace; default: no token, and protected mode: those
   * routes answer loopback clients only (else 403 `ECC_PROTECTED_MODE`).
   */
  adminToken?: string;
  /**
   * The access log: the share of requests logged, one line each at `info`
   * (access-log.ts), 0 to 1. Default 0: off.
   */
  accessLogSampleRate?: number;
  /**
   * Where the service is in its life, owned by the caller: `/readyz` answers
   * 503 while `warming` or `closing` is true. `main` sets `warming` during the
   * start-up warm-up and `closing` on SIGTERM, before `app.close()`. Default:
   * a new one, neither warming nor closing.
   */
  lifecycle?: Lifecycle;
  /**
   * Read-your-writes of the tables that follow a change stream (a GET with
   * `Echostore-Min-Lsn` or `Echostore-Min-Binlog`); undefined for a table that does not. Default: none does.
   */
  readAfter?: (table: string) => ReadAfter | undefined;
}

/**
 * Builds the fastify app (not listening yet): item routes, warm-up, operator
 * routes, the OpenAPI document, coded JSON errors for everything, including
 * unknown routes, bad URLs and requests Node's HTTP parser rejects.
 * `app.close()` stops accepting, lets running requests finish, and turns
 * `/readyz` to 503. While `lifecycle.closing`, answers carry `Connection:
 * close`, so keep-alive clients reconnect (through their load balancer) while
 * this instance still serves.
 *
 * The routes are registered in a plugin, after `@fastify/swagger`, so they
 * are added when the app loads (`ready()`, `listen()`): an `onRoute` hook
 * added to the returned app sees every one of them.
 *
 * @throws {TypeError} when `adminToken` is empty or contains whitespace.
 */
export function buildServer(options: ServerOptions): FastifyInstance {
  const admin = adminOnly(options.adminToken);
  const lifecycle: Lifecycle = options.lifecycle ?? { warming: false, closing: false };
  const log = options.logger as FastifyBaseLogger;
  const app = Fastify({
    loggerInstance: log,
    // Per-request logs would cost more than an L1 hit; errors are logged by the error handler.
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: requestLoggerFactory(options.accessLogSampleRate ?? 0),
    bodyLimit: options.bodyLimitBytes ?? 1024 * 1024,
    // Node's own request timeout (headers and body); its 408 is answered as coded JSON
    // (client-errors.ts). Given to the server at construction too: Node enforces only that one.
    requestTimeout: options.requestTimeoutMs ?? 30_000,
    // Long ids must reach the store's id check (400 ECC_BAD_ID), not the
    // router's param limit; Node's 16 KiB header limit bounds URLs anyway (431).
    routerOptions: { maxParamLength: 65_536 },
    // fastify's own 503 while closing is not coded JSON: requests that still
    // arrive are served (the store answers ECC_CLOSED once it has closed) and
    // /readyz answers 503 { status: "closing" }.
    return503OnClosing: false,
    frameworkErrors: (error, request, reply) => sendError(request, reply, error),
    clientErrorHandler: (error, socket) => answerClientError(error, socket, log),
    // requireHost answers a missing Host with the coded JSON instead.
    // requestTimeout (and headersTimeout) are enforced at this interval, ms.
    http: {
      requireHostHeader: false,
      requestTimeout: options.requestTimeoutMs ?? 30_000,
      connectionsCheckingInterval: 1_000,
    },
  });
  // Every method Node parses (PROPFIND, PURGE, LINK, …) is routed, so a path that serves others
  // answers it 405 with Allow (methods.ts) rather than 404; CONNECT never reaches the router.
  for (const method of METHODS) {
    if (method !== 'CONNECT' && !app.supportedMethods.includes(method)) app.addHttpMethod(method);
  }
  // Before the routes: it gives each its own hook from onRoute.
  const metrics = installRequestMetrics(app, options.store.registry);
  // Inside the Host check and the pipelining order (they wrap it below), before fastify.
  if (!options.store.traced && (options.accessLogSampleRate ?? 0) === 0) {
    answerL1Hits(app.server, {
      store: options.store,
      readAfter: options.readAfter ?? (() => undefined),
      observe: metrics.observerOf(ITEM_PATH),
      log,
    });
  }
  // A client that half-closes after its requests (`nc -N`, some health checkers) gets their
  // answers, then the close: by default Node drops requests still in progress at the FIN.
  // `httpAllowHalfOpen` is Node's own switch for this (`_http_server.js`, not in its types).
  (app.server as typeof app.server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  requireHost(app.server, log);
  orderPipelined(app.server);
  app.server.on('connect', (_request, socket) => answerConnect(socket, log));
  app.server.on('checkExpectation', (_request, response) => answerExpectation(response, log));
  installErrorHandlers(app, metrics.unmatched);
  installJsonBodyParser(app);
  app.addHook('onClose', async () => {
    lifecycle.closing = true;
  });
  app.addHook('preClose', async () => {
    lifecycle.closing = true;
  });
  // On the raw response before any route runs (fastify keeps it when it writes its headers):
  // an onSend hook would run on every answer of every route.
  app.server.prependListener('request', (_request, response) => {
    if (lifecycle.closing) response.setHeader('connection', 'close');
  });
  installAccessLog(app, { sampleRate: options.accessLogSampleRate ?? 0 });
  installOpenApi(app);
  app.register(async (api) => {
    itemRoutes(api, options.store, admin, options.readAfter ?? (() => undefined));
    batchRoutes(api, options.store, options.maxBatchBytes);
    warmRoutes(api, options.store, admin);
    inspectRoutes(api, options.store, admin);
    purgeRoutes(api, options.store, admin);
    opsRoutes(api, options.store, lifecycle);
    statusRoutes(api);
    openApiRoute(api);
  });
  return app;
}
