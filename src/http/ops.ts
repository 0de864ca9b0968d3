import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/store.js';
import { DEGRADED_REASONS } from '../valkey/breaker.js';
import { errorResponses } from './openapi.js';
import { valkeyTopology } from './topology.js';

/** Where the service is in its life, for `/readyz`: ready only while neither warming nor closing. */
export interface Lifecycle {
  /** True until the start-up warm-up has ended: `/readyz` answers 503 `warming`. */
  warming: boolean;
  /** True from the shutdown signal on: `/readyz` answers 503 `closing`. */
  closing: boolean;
}

const OPERATOR = ['operator'];

// Bodies that may grow (stats, readiness) allow extra properties: these
// schemas are also the serialisers, which drop any property not allowed.
const tablesBody = {
  type: 'object',
  required: ['tables'],
  properties: {
    tables: {
      type: 'array',
      items: {
        type: 'object',
        required: ['name', 'policy', 'stats'],
        properties: {
          name: { type: 'string' },
          policy: {
            type: 'object',
            additionalProperties: true,
            description: "The table's resolved policy, defaults applied (docs/configuration.md).",
          },
          stats: {
            type: 'object',
            additionalProperties: { type: 'number' },
            description:
              'Counters since start (`hits`, `misses`, `loads`, `l2_hits`, `coalesced`; `fills` is `loads` under its deprecated name) and gauges now (`l1_entries`, `l1_bytes`, `flights`, `mailbox_depth`, `loads_active`, `loads_queued`, `load_limit`, `queue_delay_ms`).',
          },
        },
      },
    },
  },
} as const;

const readiness = (statuses: readonly string[], description: string) =>
  ({
    type: 'object',
    description,
    required: ['status', 'valkey'],
    additionalProperties: true,
    properties: {
      status: { type: 'string', enum: statuses },
      valkey: {
        type: 'string',
        description: 'The ioredis connection status (`ready`, `connecting`, …).',
      },
      reason: {
        type: 'string',
        enum: DEGRADED_REASONS,
        description:
          'While degraded, why: `disconnected`, `unreachable` (timeouts), or the server’s refusal (`oom`, `readonly`, `noperm`, …).',
      },
      details: {
        type: 'object',
        description: 'What the store knows of its Valkey server (docs/operations.md).',
        properties: {
          coherence: { type: 'boolean', description: 'Pub/Sub coherence on (`valkey.coherence`).' },
          subscriber: {
            type: ['string', 'null'],
            description: 'The subscriber connection’s status; null with coherence off.',
          },
          maxmemoryPolicy: {
            type: ['string', 'null'],
            description: "Valkey's `maxmemory-policy`; null when this user may not read it.",
          },
          evictionRisk: {
            type: ['string', 'null'],
            description: 'Why that policy may evict leases and tombstones first; else null.',
          },
          topology: {
            type: 'object',
            description:
              'The Valkey deployment as the client knows it now: `mode` (`standalone`, `cluster`, `sentinel`), `nodes` (`host:port` of the server, the primaries, or the primary Sentinel named), `master` (the Sentinel master name).',
            required: ['mode', 'nodes'],
            properties: {
              mode: { type: 'string', enum: ['standalone', 'cluster', 'sentinel'] },
              nodes: { type: 'array', items: { type: 'string' } },
              master: { type: 'string' },
            },
          },
        },
      },
    },
  }) as const;

/** Operator routes: tables and their stats, Prometheus metrics, liveness, readiness. */
export function opsRoutes(app: FastifyInstance, store: Store, lifecycle: Lifecycle): void {
  app.get(
    '/v1/tables',
    {
      schema: {
        summary: 'The tables, their policies and stats',
        tags: OPERATOR,
        response: { 200: tablesBody, ...errorResponses({}) },
      },
    },
    async () => ({
      tables: store.tables().map((t) => {
        const { idPattern, ...policy } = t.policy;
        return {
          name: t.name,
          policy: { ...policy, idPattern: idPattern?.source ?? null },
          stats: t.stats(),
        };
      }),
    }),
  );

  app.get(
    '/metrics',
    {
      schema: {
        summary: 'Prometheus metrics (docs/metrics.md)',
        tags: OPERATOR,
        response: {
          200: {
            description: 'Prometheus text exposition format 0.0.4.',
            content: { 'text/plain': { schema: { type: 'string' } } },
          },
          ...errorResponses({}),
        },
      },
    },
    async (_request, reply) => {
      const text = await store.registry.metrics();
      return reply.type(store.registry.contentType).send(text);
    },
  );

  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness: 200 while the process runs',
        tags: OPERATOR,
        response: {
          200: {
            type: 'object',
            required: ['status'],
            properties: { status: { type: 'string', enum: ['ok'] } },
          },
          ...errorResponses({}),
        },
      },
    },
    async () => ({ status: 'ok' }),
  );

  // Ready while serving; "degraded" (still 200) while Valkey is unusable (unreachable,
  // out of memory, read-only, refusing permissions: `reason`), because L1 hits and
  // source reads keep answering; 503 while the start-up warm-up runs and from the
  // shutdown signal on.
  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness: send traffic here only while it answers 200',
        tags: OPERATOR,
        response: {
          200: readiness(
            ['ready', 'degraded'],
            '`degraded`: Valkey is unusable (`reason` says why); L1 and the source still answer.',
          ),
          503: readiness(
            ['warming', 'closing'],
            '`warming`: the start-up warm-up runs; `closing`: shutting down.',
          ),
          ...errorResponses({}),
        },
      },
    },
    async (_request, reply) => {
      const valkey = store.valkey.status;
      if (lifecycle.closing) return reply.code(503).send({ status: 'closing', valkey });
      if (lifecycle.warming) return reply.code(503).send({ status: 'warming', valkey });
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
          topology: valkeyTopology(store.valkey),
        },
      };
    },
  );
}
