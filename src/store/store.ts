import { Ajv } from 'ajv';
import type { Redis } from 'ioredis';
import { type Logger, pino } from 'pino';
import { Registry } from 'prom-client';
import { schemaProblem } from '../config/schema-error.js';
import { ConfigError, UnknownTableError } from '../errors.js';
import { newCounters, StoreMetrics } from '../metrics.js';
import { createValkeyClient, type ValkeyOptions, waitReady } from '../valkey.js';
import { Admission } from './admission.js';
import { coarseClock } from './clock.js';
import { VersionClock } from './envelope.js';
import type { TableContext } from './flight.js';
import { L1 } from './l1.js';
import { TableOwner } from './owner.js';
import { policySchemaProperties, resolvePolicy, type TablePolicyInput } from './policy.js';
import { RESERVED_TABLE_NAMES, TABLE_NAME, Table } from './table.js';
import type { LoadFn } from './types.js';
import { Breaker, type BreakerOptions } from './valkey/breaker.js';
import { TableEvents } from './valkey/events.js';
import { L2 } from './valkey/scripts.js';

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
  /**
   * @internal This process's monotonic clock, ms, for L1 freshness (tests
   * inject one). Default `performance.now`. Freshness in Valkey is judged on
   * Valkey's clock.
   */
  now?: () => number;
  /** @internal Tuning of the circuit breaker in front of Valkey (tests inject its clock). */
  breaker?: BreakerOptions;
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
 * one metrics registry. Waits up to `readyTimeoutMs` for Valkey, and as long
 * again for the tables' event subscriptions (so no other instance's write is
 * missed once it answers); if Valkey is not reachable the store starts degraded
 * and reconnects by itself.
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
  const now = options.now ?? (() => performance.now());
  // An injected clock drives the hit path too, so tests see one clock.
  const hitNow = options.now ?? coarseClock();
  const clock = new VersionClock();
  const breaker = new Breaker(valkey, log, options.breaker);
  metrics.watchDegraded(() => breaker.degraded);
  // One subscriber connection: coherence for every table, fill wake-ups for the fleet lease.
  const events = new TableEvents(valkey, log);
  const subscribed: Promise<boolean>[] = [];
  const deps = { valkey, breaker, events, subscribed, metrics, clock, log, now, hitNow };
  const tables = new Map<string, Table>();
  try {
    for (const [name, input] of Object.entries(options.tables)) {
      tables.set(name, buildTable(name, input, deps));
    }
  } catch (err) {
    breaker.close();
    await events.close();
    if (ownsClient) valkey.disconnect();
    throw err;
  }
  // Without a listener ioredis prints every connection error; the metric and readiness report it instead.
  let lastError: Error | undefined;
  const onError = (err: Error) => {
    lastError = err;
    log.debug({ err }, 'valkey connection error');
  };
  valkey.on('error', onError);

  const readyTimeoutMs = options.readyTimeoutMs ?? 2_000;
  const ready = await waitReady(valkey, readyTimeoutMs);
  // Coherence: a store that answers before its subscription is confirmed could
  // miss another instance's write or delete and keep an old L1 row.
  if (ready) await settledWithin(Promise.all(subscribed), readyTimeoutMs);
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
    valkeyReady: () => !breaker.degraded,
    async close(graceMs = 5_000) {
      await Promise.all([...tables.values()].map((t) => t.close(graceMs)));
      await events.close();
      breaker.close();
      valkey.off('error', onError);
      if (ownsClient) await valkey.quit().catch(() => valkey.disconnect());
    },
  };
}

/** What every table of a store shares. */
interface StoreDeps {
  valkey: Redis;
  breaker: Breaker;
  events: TableEvents;
  /** Each table's subscription, confirmed or failed. */
  subscribed: Promise<boolean>[];
  metrics: StoreMetrics;
  clock: VersionClock;
  log: Logger;
  now: () => number;
  /** The clock of the L1 hit path. */
  hitNow: () => number;
}

function buildTable(name: string, input: TableOptions, deps: StoreDeps): Table {
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
  const counters = newCounters();
  const l1 = new L1(policy.l1, policy.jitter);
  let table: Table | undefined;
  const ctx: TableContext = {
    table: name,
    policy,
    load,
    l2: new L2(deps.valkey, deps.breaker, name),
    events: deps.events,
    counters,
    metrics: deps.metrics.forTable(name, counters, () => (table as Table).stats()),
    clock: deps.clock,
    admission: new Admission({
      maxLimit: policy.maxConcurrentLoads,
      maxQueueDelayMs: policy.maxQueueDelayMs,
      maxQueued: policy.maxQueuedLoads,
    }),
    log: deps.log.child({ table: name }),
    now: deps.now,
  };
  const owner = new TableOwner(ctx, l1);
  deps.subscribed.push(
    deps.events.subscribe(name, {
      onEvent: (event) => owner.post({ kind: 'event', event }),
      onReconnect: () => owner.post({ kind: 'flush' }),
    }),
  );
  table = new Table(ctx, l1, owner, deps.hitNow);
  return table;
}

/** Waits for `promise` to settle, at most `ms`. */
async function settledWithin(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  await Promise.race([promise, timeout]);
  clearTimeout(timer);
}
