import { Ajv } from 'ajv';
import type { Redis } from 'ioredis';
import { type Logger, pino } from 'pino';
import { Registry } from 'prom-client';
import { schemaProblem } from '../config/schema-error.js';
import { ConfigError, UnknownTableError } from '../errors.js';
import { StoreMetrics } from '../metrics.js';
import { createValkeyClient, type ValkeyOptions, waitReady } from '../valkey.js';
import { createVersionClock, type VersionClock } from './envelope.js';
import { TableEvents } from './events.js';
import { LoadGate } from './gate.js';
import { ValkeyHealth } from './health.js';
import { RESERVED_TABLE_NAMES, TABLE_NAME } from './keys.js';
import { L1 } from './l1.js';
import { LeaseScripts } from './lease.js';
import { TableOwner } from './owner.js';
import { policySchemaProperties, resolvePolicy, type TablePolicyInput } from './policy.js';
import { Table, type TableCounters } from './table.js';
import type { LoadFn } from './types.js';

/** One table of `createStore`: its loader and, optionally, its policy. */
export interface TableOptions extends TablePolicyInput {
  /** Reads one item from the source of truth; `undefined` means "not found". */
  load: LoadFn;
}

/** Options of {@link createStore}. */
export interface StoreOptions {
  /** A URL / options object (the store owns and closes that client), or an ioredis client you own. */
  valkey: string | ValkeyOptions | Redis;
  /** Tables by name (`[a-z0-9_-]{1,64}`). */
  tables: Record<string, TableOptions>;
  /** Where metrics are registered. Default: a new registry per store. */
  registry?: Registry;
  /** pino logger. Default: silent. */
  logger?: Logger;
  /** How long `createStore` waits for Valkey before starting degraded (reads go to the source). Default 2,000 ms. */
  readyTimeoutMs?: number;
}

/** A running store: its tables, its Valkey client, its metrics. */
export interface Store {
  /**
   * The table named `name`.
   *
   * @throws {UnknownTableError} `ECC_UNKNOWN_TABLE` when there is no such table.
   */
  table(name: string): Table;
  /** Every table, in configuration order. */
  tables(): Table[];
  /** The metrics registry (Prometheus text via `registry.metrics()`). */
  readonly registry: Registry;
  /** The Valkey client in use. */
  readonly valkey: Redis;
  /** True while the Valkey connection is up; false means degraded (misses go straight to the source). */
  valkeyReady(): boolean;
  /**
   * Stops taking new misses and writes, waits up to `graceMs` (default 5,000)
   * for flights and writes to settle, fails what is left with `ECC_CLOSED`,
   * and quits Valkey if the store created the client.
   */
  close(graceMs?: number): Promise<void>;
}

const ajv = new Ajv({ allErrors: false, strict: true });
const validatePolicy = ajv.compile({
  type: 'object',
  properties: { ...policySchemaProperties, load: {} },
  additionalProperties: false,
});

/**
 * Creates a store: one owner actor and one L1 per table, one Valkey client,
 * one metrics registry. Waits up to `readyTimeoutMs` for Valkey; if it is not
 * reachable the store starts degraded and reconnects by itself.
 *
 * @example
 * const store = await createStore({
 *   valkey: 'redis://127.0.0.1:6379',
 *   tables: { products: { load: (id) => db.product(id), ttlMs: 60_000 } },
 * });
 * const r = await store.table('products').get('42');
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG`, naming the table and field, when a table's options are invalid.
 */
export async function createStore(options: StoreOptions): Promise<Store> {
  const log = options.logger ?? pino({ level: 'silent' });
  const registry = options.registry ?? new Registry();
  const metrics = new StoreMetrics(registry);
  const ownsClient = typeof options.valkey === 'string' || !('status' in options.valkey);
  const valkey: Redis =
    typeof options.valkey === 'string'
      ? createValkeyClient({ url: options.valkey })
      : 'status' in options.valkey
        ? options.valkey
        : createValkeyClient(options.valkey);
  const clock = createVersionClock();

  const lease = new LeaseScripts(valkey);
  const health = new ValkeyHealth(valkey, log);
  metrics.watchDegraded(() => health.degraded);
  // One subscriber connection: coherence for every table, fill wake-ups for the fleet lease.
  const events = new TableEvents(valkey, log);
  const tables = new Map<string, Table>();
  try {
    for (const [name, input] of Object.entries(options.tables)) {
      tables.set(
        name,
        buildTable(name, input, { valkey, lease, health, events, metrics, clock, log }),
      );
    }
  } catch (err) {
    await events.close();
    if (ownsClient) valkey.disconnect();
    throw err;
  }
  // Without a listener ioredis prints every connection error; the metric and readiness report it instead.
  let lastError: Error | undefined;
  valkey.on('error', (err: Error) => {
    lastError = err;
    log.debug({ err }, 'valkey connection error');
  });

  const ready = await waitReady(valkey, options.readyTimeoutMs ?? 2_000);
  if (!ready) {
    // The reason (refused, TLS certificate, auth) matters to an operator at start-up.
    log.warn(
      { reason: lastError?.message },
      'valkey is not reachable: starting degraded, reads go to the source',
    );
  }

  return {
    registry,
    valkey,
    table(name) {
      const t = tables.get(name);
      if (t === undefined) throw new UnknownTableError(`no table named ${name}`, { table: name });
      return t;
    },
    tables: () => [...tables.values()],
    valkeyReady: () => !health.degraded,
    async close(graceMs = 5_000) {
      await Promise.all([...tables.values()].map((t) => t.close(graceMs)));
      await events?.close();
      if (ownsClient) await valkey.quit().catch(() => valkey.disconnect());
    },
  };
}

function buildTable(
  name: string,
  input: TableOptions,
  deps: {
    valkey: Redis;
    lease: LeaseScripts;
    health: ValkeyHealth;
    events: TableEvents;
    metrics: StoreMetrics;
    clock: VersionClock;
    log: Logger;
  },
): Table {
  if (!TABLE_NAME.test(name) || RESERVED_TABLE_NAMES.has(name)) {
    throw new ConfigError(
      `tables.${name}: table names must match ${TABLE_NAME.source} and not be __proto__, constructor or prototype`,
      { field: `tables.${name}` },
    );
  }
  if (typeof input?.load !== 'function') {
    throw new ConfigError(`tables.${name}.load: must be a function (id, { signal }) => value`, {
      field: `tables.${name}.load`,
    });
  }
  if (!validatePolicy(input)) {
    const { field, reason } = schemaProblem(validatePolicy.errors, `tables.${name}`);
    throw new ConfigError(`${field}: ${reason}`, { field });
  }
  const { load, ...policyInput } = input;
  const policy = resolvePolicy(policyInput, `tables.${name}`);
  const counters: TableCounters = {
    hits: 0,
    misses: 0,
    fills: 0,
    l2_hits: 0,
    coalesced: 0,
    reads: { l1: 0, l2: 0, source: 0, negative: 0, stale: 0 },
  };
  const l1 = new L1(policy.l1, policy.jitter);
  let table: Table | undefined;
  const tableMetrics = deps.metrics.forTable(name, () => (table as Table).stats(), counters.reads);
  const owner = new TableOwner(
    {
      table: name,
      policy,
      load,
      valkey: deps.valkey,
      lease: deps.lease,
      events: deps.events,
      metrics: tableMetrics,
      clock: deps.clock,
      gate: new LoadGate(policy.maxConcurrentLoads, policy.maxQueuedLoads),
      health: deps.health,
      log: deps.log.child({ table: name }),
    },
    l1,
    counters,
  );
  deps.events.subscribe(name, {
    onEvent: (event) => owner.post({ kind: 'event', event }),
    onReconnect: () => owner.post({ kind: 'flush' }),
  });
  table = new Table(name, policy, l1, owner, counters);
  return table;
}
