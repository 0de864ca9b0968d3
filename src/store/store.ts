import { Ajv } from 'ajv';
import type { Cluster, Redis } from 'ioredis';
import { type Logger, pino } from 'pino';
import { Registry } from 'prom-client';
import type { TableContext } from '../actor/flight.js';
import { TableOwner } from '../actor/owner.js';
import { schemaProblem } from '../config/schema-error.js';
import { ConfigError, UnknownTableError } from '../errors.js';
import { TableEvents } from '../l2/events.js';
import { eventsChannel } from '../l2/keys.js';
import { L2 } from '../l2/scripts.js';
import { newCounters, StoreMetrics } from '../metrics.js';
import { Admission } from '../protection/admission.js';
import type { BreakerOptions, DegradedReason } from '../valkey/breaker.js';
import { createValkeyClient, type ValkeyOptions, waitReady } from '../valkey/client.js';
import { tlsOptions } from '../valkey/credentials.js';
import {
  checkAccess,
  type EvictionPolicy,
  healthProbe,
  readEvictionPolicy,
  within,
} from '../valkey/probe.js';
import { watchRedirects } from '../valkey/redirects.js';
import { type Breakers, breakersFor } from '../valkey/shard-breaker.js';
import { isCluster } from '../valkey/slots.js';
import { checkTopology } from '../valkey/topology.js';
import { batchingLoader } from './batch-load.js';
import { coarseClock } from './clock.js';
import { Epochs } from './epochs.js';
import { L1 } from './l1.js';
import { NotFoundConfirmations } from './not-found.js';
import { policySchemaProperties, resolvePolicy, type TablePolicyInput } from './policy.js';
import { RESERVED_TABLE_NAMES, TABLE_NAME, Table } from './table.js';
import { TableTracer, type TracingOptions } from './tracing.js';
import type { LoadFn, LoadManyFn } from './types.js';
import { VersionClock } from './version-clock.js';

/** One table of `createStore`: its loader (`load`, `loadMany` or both) and, optionally, its policy. */
export interface TableOptions extends TablePolicyInput {
  /** Reads one item from the source of truth; `undefined` means "not found". Required unless `loadMany` is given. */
  load?: LoadFn;
  /**
   * Reads many items in one call (batched loading, DataLoader-style): the misses gathered within
   * one tick or `batchWindowMs` (at most `maxBatchSize`) go to it as one call, while each id keeps
   * its own flight, lease and waiters. When given, every miss goes through it and `load` is not called.
   */
  loadMany?: LoadManyFn;
  /**
   * The source's own id rule, checked with the table's before anything
   * touches Valkey or the source (an http source refuses dot-segments).
   *
   * @throws {BadIdError} `ECC_BAD_ID` for an id the source cannot take.
   */
  checkId?: (id: string) => void;
  /**
   * Names the source this table reads (up to 64 characters, no whitespace or `|`; the service
   * derives it from the table's `source`). Every row it writes carries it, and a row another
   * source wrote under the same table name (another fingerprint) is a miss, counted
   * (`echostore_foreign_rows_total`) and warned of, never served. Default `''`.
   */
  fingerprint?: string;
}

/** A namespace: what {@link StoreOptions.namespace} takes. */
export const NAMESPACE = /^[a-z0-9_-]{1,64}$/;

/** A source fingerprint: what {@link TableOptions.fingerprint} takes. */
export const FINGERPRINT = /^[\x21-\x7b\x7d\x7e]{0,64}$/;

/** Options of {@link createStore}. */
export interface StoreOptions {
  /**
   * A URL / options object (the store owns and closes that client: one server,
   * a cluster or a Sentinel-managed primary), or an ioredis client or
   * cluster client you own.
   */
  valkey: string | ValkeyOptions | Redis | Cluster;
  /** Tables by name (`[a-z0-9_-]{1,64}`). */
  tables: Record<string, TableOptions>;
  /**
   * The namespace every key, lease, tombstone, purge epoch and channel of this store lives in
   * (`[a-z0-9_-]{1,64}`): keys `ecc:<namespace>:<table>:…`, channels
   * `ecc:events:<namespace>:<table>`, so deployments on one Valkey in different namespaces
   * never read each other's rows. Unset: the unnamed namespace of earlier releases
   * (`ecc:<table>:…`, `ecc:events:<table>`).
   */
  namespace?: string;
  /** Where metrics are registered. Default: a new registry per store. */
  registry?: Registry;
  /** pino logger. Default: silent. */
  logger?: Logger;
  /** How long `createStore` waits for Valkey before starting degraded (reads go to the source). Default 2,000 ms. */
  readyTimeoutMs?: number;
  /**
   * Coherence between instances over Pub/Sub (a write drops the row from every
   * instance's L1). Default true: the Valkey user needs the channels
   * `ecc:events:*` (`&ecc:events:*`, `+@pubsub`). false: no subscriber and no
   * PUBLISH; other instances serve a replaced row from L1 until its L1 TTL.
   */
  coherence?: boolean;
  /**
   * @internal This process's monotonic clock, ms, for L1 freshness (tests
   * inject one). Default `performance.now`. Freshness in Valkey is judged on
   * Valkey's clock.
   */
  now?: () => number;
  /**
   * Traces through `@opentelemetry/api`: a span per read (`echostore.get`)
   * and per load (`echostore.load`), ids hashed unless `ids: 'plain'`
   * (docs/operations.md, traces). Default: none, at no cost.
   */
  tracing?: TracingOptions;
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
  /** The Valkey client in use (a `Cluster` in cluster mode). */
  readonly valkey: Redis | Cluster;
  /** True when the store was given `tracing`: the HTTP routes then take the caller's `traceparent`. */
  readonly traced: boolean;
  /** The namespace its keys and channels live in ({@link StoreOptions.namespace}); `''` when unset. */
  readonly namespace: string;
  /** True while the Valkey connection is up; false means degraded (misses go straight to the source). */
  valkeyReady(): boolean;
  /** What `/readyz` reports about Valkey: why the store runs degraded, coherence, eviction. */
  valkeyHealth(): ValkeyHealth;
  /**
   * Stops taking new misses and writes, waits up to `graceMs` (default 5,000)
   * for flights and writes to settle, fails what is left with `ECC_CLOSED`,
   * and quits Valkey if the store created the client.
   */
  close(graceMs?: number): Promise<void>;
}

/** The store's view of its Valkey server (see {@link Store.valkeyHealth}). */
export interface ValkeyHealth {
  /** Why the store runs degraded now; undefined while it does not. */
  degradedReason: DegradedReason | undefined;
  /** Whether coherence over Pub/Sub is on (`coherence` option). */
  coherence: boolean;
  /** The subscriber connection's state (`ready`, `reconnecting`, …); undefined with coherence off. */
  subscriber: string | undefined;
  /** The subscriber connection's name in `CLIENT LIST`; undefined with coherence off. */
  subscriberName: string | undefined;
  /** The server's `maxmemory-policy` (read at start-up and on each reconnect); undefined when unknown. */
  maxmemoryPolicy: string | undefined;
  /** Why that policy may evict leases or tombstones first; undefined when it does not. */
  evictionRisk: string | undefined;
}

const ajv = new Ajv({ allErrors: false, strict: true });
const validatePolicy = ajv.compile({
  type: 'object',
  properties: { ...policySchemaProperties, load: {}, loadMany: {}, checkId: {}, fingerprint: {} },
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
 * @throws {ConfigError} `ECC_BAD_CONFIG`, naming the table and field, when a table's options
 *   are invalid; naming `valkey.cluster…` or `valkey.sentinel…` when both are given, or no
 *   seed node or Sentinel answers (see `checkTopology`).
 */
export async function createStore(options: StoreOptions): Promise<Store> {
  const log = options.logger ?? pino({ level: 'silent' });
  const namespace = options.namespace ?? '';
  if (options.namespace !== undefined && !NAMESPACE.test(options.namespace)) {
    throw new ConfigError(`namespace: must match ${NAMESPACE.source}`, { field: 'namespace' });
  }
  const ownsClient = typeof options.valkey === 'string' || !('status' in options.valkey);
  if (typeof options.valkey !== 'string' && !('status' in options.valkey)) {
    const tls = options.valkey.tls === undefined ? undefined : tlsOptions(options.valkey.tls);
    for (const unreachable of await checkTopology(options.valkey, tls)) {
      log.warn({ node: unreachable }, 'valkey seed node did not answer at start-up');
    }
  }
  const registry = options.registry ?? new Registry();
  const metrics = new StoreMetrics(registry);
  const valkey: Redis | Cluster =
    typeof options.valkey === 'string'
      ? createValkeyClient({ url: options.valkey })
      : 'status' in options.valkey
        ? options.valkey
        : createValkeyClient(options.valkey);
  const now = options.now ?? (() => performance.now());
  // An injected clock drives the hit path too, so tests see one clock.
  const hitNow = options.now ?? coarseClock();
  const clock = new VersionClock();
  const coherence = options.coherence ?? true;
  const [probed] = Object.keys(options.tables);
  const probe =
    probed === undefined
      ? undefined
      : healthProbe(
          valkey,
          probed,
          coherence ? eventsChannel(probed, namespace) : '',
          undefined,
          namespace,
        );
  // One breaker for a single server, one per primary for a cluster.
  const breaker = breakersFor(valkey, log, { probe, ...options.breaker });
  metrics.watchDegraded(() => breaker.reason);
  // A slot in migration answers TRYAGAIN at once (the scripts then go key by key), and every redirect is counted.
  const unwatchRedirects = isCluster(valkey)
    ? watchRedirects(valkey, (kind) => {
        metrics.redirects[kind]++;
      })
    : () => {};
  // One subscriber connection: coherence for every table, fill wake-ups for the fleet lease.
  const events = coherence ? new TableEvents(valkey, log, {}, namespace) : undefined;
  const subscribed = new Map<string, Promise<boolean>>();
  const tracing = options.tracing;
  const epochs: Epochs[] = [];
  const deps = {
    valkey,
    breaker,
    events,
    subscribed,
    metrics,
    clock,
    log,
    now,
    hitNow,
    tracing,
    namespace,
    epochs,
  };
  const tables = new Map<string, Table>();
  const release = async () => {
    unwatchRedirects();
    breaker.close();
    await events?.close();
    if (ownsClient) valkey.disconnect();
  };
  try {
    for (const [name, input] of Object.entries(options.tables)) {
      tables.set(name, buildTable(name, input, deps));
    }
  } catch (err) {
    await release();
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
  if (!ready) {
    // The reason (refused, TLS certificate, auth) matters to an operator at start-up.
    log.warn(
      { reason: lastError?.message },
      'valkey is not reachable: starting degraded, reads go to the source',
    );
  }
  // Rights the user lacks refuse the start (a write would fail later, or half happen).
  // This waits for the tables' subscriptions too: a store that answers before they are
  // confirmed could miss another instance's write or delete and keep an old L1 row.
  const missing = ready
    ? await checkAccess(
        valkey,
        [...tables.keys()],
        subscribed,
        coherence,
        readyTimeoutMs,
        namespace,
      )
    : [];
  if (missing.length > 0) {
    valkey.off('error', onError);
    await release();
    const field = rightsField(options.valkey);
    throw new ConfigError(`${field}: the Valkey user may not ${missing.join('; nor ')}`, {
      field,
    });
  }
  if (!coherence)
    log.info('coherence is off: no Pub/Sub; other instances keep replaced rows until their L1 TTL');
  // The first health probe now, so a full or read-only server shows at once.
  if (ready && probe !== undefined) await breaker.run(probe).catch(() => {});
  // The purge epochs before the first read, so no row purged before this start is served
  // (bounded; a table whose reading fails reads them again on its first flight).
  if (ready) {
    await within(Promise.all(epochs.map((e) => e.ensure()?.catch(() => {}))), readyTimeoutMs);
  }
  const eviction: EvictionPolicy = { policy: undefined, risk: undefined };
  const readEviction = async () => {
    const read = await readEvictionPolicy(valkey);
    if (read.risk !== undefined && read.policy !== eviction.policy) {
      log.warn(
        { maxmemoryPolicy: read.policy, risk: read.risk },
        'valkey maxmemory-policy may evict leases and DELETE tombstones: a lost lease lets a second instance load the same key, a lost tombstone lets a lease-less fill bring a deleted row back; use allkeys-lru, allkeys-lfu or noeviction',
      );
    }
    Object.assign(eviction, read);
  };
  // Read again on every reconnect: a failover may land on a server configured otherwise.
  const onReady = () => void readEviction();
  valkey.on('ready', onReady);
  // Bounded: a client the caller owns may have no command timeout.
  if (ready) await within(readEviction(), readyTimeoutMs);

  return {
    registry,
    valkey,
    traced: tracing !== undefined,
    namespace,
    table(name) {
      const t = tables.get(name);
      if (t === undefined) throw new UnknownTableError(`no table named ${name}`, { table: name });
      return t;
    },
    tables: () => [...tables.values()],
    valkeyReady: () => !breaker.degraded,
    valkeyHealth: () => ({
      degradedReason: breaker.reason,
      coherence,
      subscriber: events?.status,
      subscriberName: events?.name,
      maxmemoryPolicy: eviction.policy,
      evictionRisk: eviction.risk,
    }),
    async close(graceMs = 5_000) {
      await Promise.all([...tables.values()].map((t) => t.close(graceMs)));
      await events?.close();
      breaker.close();
      unwatchRedirects();
      valkey.off('error', onError);
      valkey.off('ready', onReady);
      if (ownsClient) await valkey.quit().catch(() => valkey.disconnect());
    },
  };
}

/** What every table of a store shares. */
interface StoreDeps {
  valkey: Redis | Cluster;
  breaker: Breakers;
  /** The subscriber; undefined with coherence off. */
  events: TableEvents | undefined;
  /** Each table's subscription, confirmed (true) or refused (false). */
  subscribed: Map<string, Promise<boolean>>;
  metrics: StoreMetrics;
  clock: VersionClock;
  log: Logger;
  now: () => number;
  /** The clock of the L1 hit path. */
  hitNow: () => number;
  tracing: TracingOptions | undefined;
  /** The store's namespace (`''`: the unnamed one). */
  namespace: string;
  /** Every table's purge epochs, read once Valkey is ready. */
  epochs: Epochs[];
}

function buildTable(name: string, input: TableOptions, deps: StoreDeps): Table {
  if (!TABLE_NAME.test(name) || RESERVED_TABLE_NAMES.has(name)) {
    throw new ConfigError(
      `tables.${name}: table names must match ${TABLE_NAME.source} and not be __proto__, constructor or prototype`,
      { field: `tables.${name}` },
    );
  }
  if (input?.loadMany !== undefined && typeof input.loadMany !== 'function') {
    throw new ConfigError(
      `tables.${name}.loadMany: must be a function (ids, { signal }) => Map of id to value`,
      { field: `tables.${name}.loadMany` },
    );
  }
  const hasLoad = input?.load !== undefined || input?.loadMany === undefined;
  if (hasLoad && typeof input?.load !== 'function') {
    throw new ConfigError(
      `tables.${name}.load: must be a function (id, { signal }) => value (or give loadMany)`,
      { field: `tables.${name}.load` },
    );
  }
  if (!validatePolicy(input)) {
    const { field, reason } = schemaProblem(validatePolicy.errors, `tables.${name}`);
    throw new ConfigError(`${field}: ${reason}`, { field });
  }
  const { load: loadOne, loadMany, checkId, fingerprint = '', ...policyInput } = input;
  if (typeof fingerprint !== 'string' || !FINGERPRINT.test(fingerprint)) {
    throw new ConfigError(
      `tables.${name}.fingerprint: must be up to 64 visible ASCII characters other than "|"`,
      { field: `tables.${name}.fingerprint` },
    );
  }
  const policy = resolvePolicy(policyInput, `tables.${name}`);
  const counters = newCounters();
  // Decided once: with loadMany, the table's loader is the batching function.
  const load: LoadFn =
    loadMany === undefined
      ? (loadOne as LoadFn)
      : batchingLoader(loadMany, {
          batchWindowMs: policy.batchWindowMs,
          maxBatchSize: policy.maxBatchSize,
          onBatch: () => {
            counters.batches++;
          },
        });
  const l1 = new L1(policy.l1, policy.jitter);
  const l2 = new L2(
    deps.valkey,
    deps.breaker,
    name,
    deps.events !== undefined,
    counters.valkeyRetries,
    deps.namespace,
    fingerprint,
    policy.fillEventMaxBytes,
  );
  // With coherence off no purge event arrives: the epochs are read again once per L1 TTL.
  const epochs = new Epochs(
    () => l2.epochs(),
    deps.events === undefined ? policy.l1.ttlMs : Number.POSITIVE_INFINITY,
  );
  deps.epochs.push(epochs);
  const log = deps.log.child({ table: name });
  if (policy.leaseMs >= policy.waitTimeoutMs) {
    log.warn(
      { leaseMs: policy.leaseMs, waitTimeoutMs: policy.waitTimeoutMs },
      'leaseMs is not below waitTimeoutMs: when a lease holder dies, its waiters time out (ECC_WAIT_TIMEOUT) before one of them can take the lease over; keep leaseMs well below waitTimeoutMs',
    );
  }
  let lastForeignWarnMs = Number.NEGATIVE_INFINITY;
  let table: Table | undefined;
  const tracer = deps.tracing === undefined ? undefined : new TableTracer(name, deps.tracing);
  const ctx: TableContext = {
    name,
    fingerprint,
    epochs,
    foreignRow(id, found) {
      const at = deps.now();
      if (at - lastForeignWarnMs < 60_000) return;
      lastForeignWarnMs = at;
      log.warn(
        { id, fingerprint: found, expected: fingerprint },
        'valkey holds a row of this table written by another source (another fingerprint): it is a miss, reloaded from this source; do two deployments share a namespace? (warned at most once a minute; echostore_foreign_rows_total counts every one)',
      );
    },
    coalesces: policy.coalescing !== 'none',
    policy,
    load: tracer === undefined ? load : tracer.wrapLoad(load),
    ...(tracer === undefined ? {} : { trace: tracer }),
    checkId,
    l2,
    events: deps.events,
    counters,
    metrics: deps.metrics.forTable(name, counters, () => (table as Table).stats()),
    clock: deps.clock,
    admission: new Admission({
      maxLimit: policy.maxConcurrentLoads,
      initialLimit: policy.initialConcurrentLoads,
      maxQueueDelayMs: policy.maxQueueDelayMs,
      maxQueued: policy.maxQueuedLoads,
      maxOverdue: policy.maxOverdueLoads,
    }),
    notFound: new NotFoundConfirmations(policy.confirmNotFoundMs, deps.now),
    log,
    now: deps.now,
  };
  const owner = new TableOwner(ctx, l1);
  const subscription = deps.events?.subscribe(name, {
    onEvent: (event) => owner.post({ kind: 'event', event }),
    onReconnect: () => owner.post({ kind: 'flush' }),
  });
  if (subscription !== undefined) deps.subscribed.set(name, subscription);
  table = new Table(ctx, l1, owner, deps.hitNow, tracer);
  return table;
}

/** The field naming the Valkey user whose rights fall short: `valkey.username` when given, else `valkey.url`. */
function rightsField(valkey: StoreOptions['valkey']): string {
  const named = typeof valkey === 'object' && 'username' in valkey && valkey.username !== undefined;
  return named ? 'valkey.username' : 'valkey.url';
}
