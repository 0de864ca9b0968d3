/**
 * Request metrics in Prometheus' conventions (RED: rate, errors, duration):
 * one histogram, `http_request_duration_seconds`, whose `_count` is the
 * request count, by `method`, `route` (the route pattern, never the raw URL:
 * bounded) and `code` (the status class, `2xx` … `5xx`).
 *
 * Own code rather than the fastify-metrics plugin, which was tried first: its
 * `onRequest` timer and per-request label objects cost about 3 µs of CPU per
 * request, a fifth of an HTTP L1 hit (`npm run bench`). prom-client's own
 * `Histogram` was next: its bound child still validates and hashes its labels
 * on every `observe`, and reading the route pattern from `request.routeOptions`
 * builds an object per request; together a tenth of an L1 hit's CPU. So each
 * route gets its own `onResponse` hook (added as the route is), which knows its
 * pattern, and bumps plain integers (as the table counters do) that the registry
 * reads at scrape time.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, onResponseHookHandler } from 'fastify';
import type { Registry } from 'prom-client';

/** Request-duration buckets, seconds: an L1 hit is well under a millisecond, a load up to seconds. */
export const REQUEST_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

/** The `route` of a request no route matched (a 404 `ECC_ROUTE_NOT_FOUND`). */
export const UNMATCHED_ROUTE = 'unmatched';

const CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const;

const REQUEST_METRIC = 'http_request_duration_seconds';

/** One series: requests of one method, route and status class. */
interface Series {
  readonly method: string;
  readonly route: string;
  readonly code: string;
  /** Requests per bucket (not cumulative): `buckets[i]` took at most `REQUEST_BUCKETS[i]` s and more than the one before; the last counts those over every bound. */
  readonly buckets: number[];
  sum: number;
  count: number;
}

/**
 * `http_request_duration_seconds` as plain integers bumped per request and
 * read by the registry at scrape time (prom-client's metric interface: `get`,
 * `reset`). Series are made on first use: bounded by the methods Node parses ×
 * the routes registered (plus one) × five classes.
 */
export class RequestHistogram {
  readonly name = REQUEST_METRIC;
  readonly help =
    'HTTP requests answered, by method, route pattern and status class (2xx … 5xx), in seconds; its _count is the request count.';
  readonly type = 'histogram';
  /** How a cluster of workers adds up (prom-client's `AggregatorRegistry`). */
  readonly aggregator = 'sum';
  /** Series by route, then `method status-class`. */
  readonly #series = new Map<string, Map<string, Series>>();

  /** The observer of `route`'s requests: takes a method, a status code and seconds. */
  observerOf(route: string): (method: string, statusCode: number, seconds: number) => void {
    let byKey = this.#series.get(route);
    if (byKey === undefined) {
      byKey = new Map();
      this.#series.set(route, byKey);
    }
    const series = byKey;
    return (method, statusCode, seconds) => {
      const code = CLASSES[Math.floor(statusCode / 100) - 1] ?? '5xx';
      const key = `${method} ${code}`;
      let s = series.get(key);
      if (s === undefined) {
        s = {
          method,
          route,
          code,
          buckets: new Array(REQUEST_BUCKETS.length + 1).fill(0),
          sum: 0,
          count: 0,
        };
        series.set(key, s);
      }
      let i = 0;
      while (i < REQUEST_BUCKETS.length && seconds > (REQUEST_BUCKETS[i] as number)) i++;
      (s.buckets[i] as number)++;
      s.sum += seconds;
      s.count++;
    };
  }

  /** The samples, as prom-client's registry formats them (cumulative buckets, `+Inf`, `_sum`, `_count`). */
  get(): {
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: Array<{ value: number; labels: Record<string, string | number>; metricName: string }>;
  } {
    const values: Array<{
      value: number;
      labels: Record<string, string | number>;
      metricName: string;
    }> = [];
    for (const byKey of this.#series.values()) {
      for (const { method, route, code, buckets, sum, count } of byKey.values()) {
        let acc = 0;
        REQUEST_BUCKETS.forEach((le, i) => {
          acc += buckets[i] as number;
          values.push({
            value: acc,
            labels: { le, method, route, code },
            metricName: `${REQUEST_METRIC}_bucket`,
          });
        });
        values.push({
          value: count,
          labels: { le: '+Inf', method, route, code },
          metricName: `${REQUEST_METRIC}_bucket`,
        });
        values.push({
          value: sum,
          labels: { method, route, code },
          metricName: `${REQUEST_METRIC}_sum`,
        });
        values.push({
          value: count,
          labels: { method, route, code },
          metricName: `${REQUEST_METRIC}_count`,
        });
      }
    }
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values,
    };
  }

  /** Forgets every series (`registry.resetMetrics()`). */
  reset(): void {
    for (const byKey of this.#series.values()) byKey.clear();
  }
}

/** An `onResponse` hook that observes each answered request of `route` on `histogram`. */
function observing(histogram: RequestHistogram, route: string): onResponseHookHandler {
  const observe = histogram.observerOf(route);
  return (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    observe(request.method, reply.statusCode, reply.elapsedTime / 1000);
    done();
  };
}

/** How the server's own code reports requests that no route's hook sees. */
export interface RequestMetrics {
  /** Observes a request no route matched (under {@link UNMATCHED_ROUTE}); the not-found handler calls it once its answer is sent. */
  unmatched(request: FastifyRequest, reply: FastifyReply): void;
  /** The observer of `route`'s requests answered before fastify (`l1-hits.ts`): a method, a status code, seconds. */
  observerOf(route: string): (method: string, statusCode: number, seconds: number) => void;
}

/**
 * Registers the request histogram on `registry` (never prom-client's global
 * one, so two servers can live in one process) and gives every route added
 * after this call its own observing `onResponse` hook.
 *
 * @returns the observers of the requests no route's hook sees.
 */
export function installRequestMetrics(app: FastifyInstance, registry: Registry): RequestMetrics {
  // Several servers over one store (one per listen address) share the store's histogram.
  const registered = registry.getSingleMetric(REQUEST_METRIC);
  let histogram: RequestHistogram;
  if (registered instanceof RequestHistogram) histogram = registered;
  else {
    histogram = new RequestHistogram();
    // prom-client reads any object with `get` (and `reset`) as a metric.
    registry.registerMetric(histogram as unknown as Parameters<Registry['registerMetric']>[0]);
  }
  app.addHook('onRoute', (route) => {
    const hook = observing(histogram, route.url);
    const own = route.onResponse;
    route.onResponse = own === undefined ? [hook] : [...(Array.isArray(own) ? own : [own]), hook];
  });
  const unmatched = histogram.observerOf(UNMATCHED_ROUTE);
  return {
    unmatched: (request, reply) =>
      unmatched(request.method, reply.statusCode, reply.elapsedTime / 1000),
    observerOf: (route) => histogram.observerOf(route),
  };
}
