import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import type { Logger } from 'pino';
import type { Store } from '../store/store.js';
import { installErrorHandlers, sendError } from './errors.js';
import { itemRoutes } from './items.js';
import { type Lifecycle, opsRoutes } from './ops.js';

/** Options of {@link buildServer}. */
export interface ServerOptions {
  store: Store;
  logger: Logger;
  /** Largest accepted request body, bytes. Default 1 MiB. */
  bodyLimitBytes?: number;
}

/**
 * Builds the fastify app (not listening yet): item routes, operator routes,
 * coded JSON errors for everything including unknown routes and bad URLs.
 * `app.close()` stops accepting, lets running requests finish, and turns
 * `/readyz` to 503.
 */
export function buildServer(options: ServerOptions): FastifyInstance {
  const lifecycle: Lifecycle = { closing: false };
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    // Per-request logs would cost more than an L1 hit; errors are logged by the error handler.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: options.bodyLimitBytes ?? 1024 * 1024,
    // Ids are up to 512 UTF-8 bytes, i.e. up to 1,536 characters percent-encoded;
    // longer ones must reach the store to get ECC_BAD_ID, not a bare 404.
    routerOptions: { maxParamLength: 8192 },
    return503OnClosing: true,
    frameworkErrors: (error, request, reply) => sendError(request, reply, error),
  });
  installErrorHandlers(app);
  // JSON bodies only: anything else is 415 ECC_UNSUPPORTED_MEDIA_TYPE.
  app.removeContentTypeParser('text/plain');
  app.addHook('onClose', async () => {
    lifecycle.closing = true;
  });
  app.addHook('preClose', async () => {
    lifecycle.closing = true;
  });
  itemRoutes(app, options.store);
  opsRoutes(app, options.store, lifecycle);
  return app;
}
