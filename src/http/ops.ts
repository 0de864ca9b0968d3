import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/store.js';

/** Whether the service is shutting down (readiness goes 503 first). */
export interface Lifecycle {
  closing: boolean;
}

/** Operator routes: tables and their stats, Prometheus metrics, liveness, readiness. */
export function opsRoutes(app: FastifyInstance, store: Store, lifecycle: Lifecycle): void {
  app.get('/v1/tables', async () => ({
    tables: store.tables().map((t) => {
      const { idPattern, ...policy } = t.policy;
      return {
        name: t.name,
        policy: { ...policy, idPattern: idPattern?.source ?? null },
        stats: t.stats(),
      };
    }),
  }));

  app.get('/metrics', async (_request, reply) => {
    const text = await store.registry.metrics();
    return reply.type(store.registry.contentType).send(text);
  });

  app.get('/healthz', async () => ({ status: 'ok' }));

  // Ready while serving; "degraded" (still 200) while Valkey is unusable (unreachable,
  // out of memory, read-only, refusing permissions: `reason`), because L1 hits and
  // source reads keep answering; 503 only while shutting down.
  app.get('/readyz', async (_request, reply) => {
    const valkey = store.valkey.status;
    if (lifecycle.closing) return reply.code(503).send({ status: 'closing', valkey });
    const h = store.valkeyHealth();
    return {
      status: h.degradedReason === undefined ? 'ready' : 'degraded',
      valkey,
      ...(h.degradedReason === undefined ? {} : { reason: h.degradedReason }),
      details: {
        coherence: h.coherence,
        subscriber: h.subscriber ?? null,
        maxmemoryPolicy: h.maxmemoryPolicy ?? null,
        evictionRisk: h.evictionRisk ?? null,
      },
    };
  });
}
