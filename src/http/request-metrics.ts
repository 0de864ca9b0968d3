/**
 * Request metrics in Prometheus' conventions (RED: rate, errors, duration),
 * through fastify-metrics: one histogram, `http_request_duration_seconds`,
 * whose `_count` is the request count, by `method`, `route` (the route
 * pattern, never the raw URL: bounded) and `code` (the status class, `2xx` …
 * `5xx`).
 */
import type { FastifyInstance } from 'fastify';
import fastifyMetrics from 'fastify-metrics';
import type { Registry } from 'prom-client';

/** Request-duration buckets, seconds: an L1 hit is well under a millisecond, a load up to seconds. */
export const REQUEST_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

/** The `route` of a request no route matched (a 404 `ECC_ROUTE_NOT_FOUND`, a URL fastify refused). */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * Registers the request histogram on `registry` (never prom-client's global
 * one, so two servers can live in one process). Register it before the
 * routes: it learns them from `onRoute`.
 */
export function installRequestMetrics(app: FastifyInstance, registry: Registry): void {
  // A CommonJS module: its plugin is the `default` of what Node's ESM loader hands over.
  app.register(fastifyMetrics.default, {
    endpoint: null, // /metrics is ops.ts's, with the store's registry
    defaultMetrics: { enabled: false }, // main.ts collects them on the same registry
    routeMetrics: {
      enabled: { histogram: true, summary: false },
      // Every request, unmatched ones under one label; HEAD is a read like GET.
      registeredRoutesOnly: false,
      invalidRouteGroup: UNMATCHED_ROUTE,
      methodBlacklist: [],
      groupStatusCodes: true,
      overrides: {
        labels: { status: 'code' },
        histogram: {
          name: 'http_request_duration_seconds',
          help: 'HTTP requests answered, by method, route pattern and status class (2xx … 5xx), in seconds; its _count is the request count.',
          buckets: REQUEST_BUCKETS,
          registers: [registry],
        },
        // Not used, but created anyway: keep it off the global registry.
        summary: { registers: [] },
      },
    },
  });
}
