/**
 * The loader side of a flight: calling the loader under the table's gate and
 * `loadTimeoutMs`, and wrapping its result in an envelope with jittered TTLs.
 */
import {
  BadValueError,
  EchoStoreError,
  LoadFailedError,
  LoadTimeoutError,
  ShedError,
} from '../errors.js';
import { type Envelope, toJson } from './envelope.js';
import type { Flight, FlightContext } from './flight.js';
import type { TablePolicy } from './policy.js';

/**
 * Loads `flight.id` from the source and wraps it in a fresh envelope
 * (`undefined` from the loader becomes a negative envelope).
 *
 * @throws {ShedError} `ECC_SHED` when the table runs `maxConcurrentLoads` loads and
 *   `maxQueuedLoads` wait already, or a queued load waited `leaseMs − loadTimeoutMs`
 *   (so a lease can never expire under a queued load).
 * @throws {LoadTimeoutError} `ECC_LOAD_TIMEOUT`; {@link BadValueError} `ECC_BAD_VALUE`;
 *   anything the loader throws (mapped later by {@link asStoreError}).
 */
export async function loadEnvelope(ctx: FlightContext, flight: Flight): Promise<Envelope> {
  const { policy, table, metrics } = ctx;
  await ctx.gate.acquire(policy.leaseMs - policy.loadTimeoutMs, () => {
    metrics.shed.inc();
    return new ShedError(
      `table ${table} runs ${policy.maxConcurrentLoads} loads and has ${policy.maxQueuedLoads} queued`,
      { table, id: flight.id },
    );
  });
  try {
    flight.loaded = true;
    const started = performance.now();
    const value = await callLoader(ctx, flight);
    return buildEnvelope(ctx, flight.id, value, Math.round(performance.now() - started));
  } finally {
    ctx.gate.release();
  }
}

/**
 * Calls the loader under `loadTimeoutMs`. The
 * signal belongs to the flight; a result that lands after the timeout is
 * discarded and counted.
 */
async function callLoader(ctx: FlightContext, flight: Flight): Promise<unknown> {
  const { policy, metrics } = ctx;
  metrics.fills.inc();
  const started = performance.now();
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      const error = new LoadTimeoutError(`load took longer than ${policy.loadTimeoutMs} ms`, {
        table: ctx.table,
        id: flight.id,
      });
      flight.abort.abort(error);
      reject(error);
    }, policy.loadTimeoutMs);
  });
  let loading: Promise<unknown>;
  try {
    loading = Promise.resolve(ctx.load(flight.id, { signal: flight.abort.signal }));
  } catch (err) {
    loading = Promise.reject(err);
  }
  const late = () => {
    if (timedOut) metrics.lateLoads.inc();
  };
  loading.then(late, late);
  try {
    return await Promise.race([loading, timeout]);
  } finally {
    clearTimeout(timer);
    metrics.loadSeconds.observe((performance.now() - started) / 1000);
  }
}

/** Wraps a loaded value (or "not found") in a fresh envelope with jittered soft TTL. */
function buildEnvelope(ctx: FlightContext, id: string, value: unknown, deltaMs: number): Envelope {
  const { policy } = ctx;
  const now = Date.now();
  if (value === undefined) {
    return {
      value: null,
      json: 'null',
      version: ctx.clock.mint(),
      softExpiresAt: now + Math.round(policy.negativeTtlMs * jitterFactor(policy)),
      deltaMs,
      negative: true,
    };
  }
  const json = toJson(value);
  if (json === undefined) {
    throw new BadValueError('the loader returned a value that cannot be serialised as JSON', {
      table: ctx.table,
      id,
    });
  }
  return {
    value,
    json,
    version: ctx.clock.mint(),
    softExpiresAt: now + Math.round(policy.ttlMs * jitterFactor(policy)),
    deltaMs,
    negative: false,
  };
}

/** uniform(1, 1 + jitter): spreads expiries so keys written together do not expire together. */
export function jitterFactor(policy: TablePolicy): number {
  return 1 + Math.random() * policy.jitter;
}

/**
 * The hard TTL (Valkey `PX`) of an envelope: the jittered soft TTL plus `staleMs`
 * scaled by the same factor; a negative entry gets no stale time.
 */
export function hardTtlMs(policy: TablePolicy, envelope: Envelope, now: number): number {
  const softMs = Math.max(1, envelope.softExpiresAt - now);
  if (envelope.negative) return softMs;
  return softMs + Math.round(policy.staleMs * (softMs / policy.ttlMs));
}

/** Maps anything thrown by a loader to the coded error every waiter receives. */
export function asStoreError(err: unknown, table: string, id: string): EchoStoreError {
  if (err instanceof EchoStoreError) return err;
  // The detail (an origin URL, a driver message) stays in `cause` for the logs;
  // clients only ever see this sentence.
  return new LoadFailedError('the source failed to load the item', { table, id, cause: err });
}
