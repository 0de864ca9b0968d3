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
  SourceError,
} from '../errors.js';
import { type Envelope, toJson } from './envelope.js';
import type { Flight, FlightContext } from './flight.js';
import type { TablePolicy } from './policy.js';
import { LoadResult, type RowPolicy } from './result.js';

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
      `table ${table} runs ${policy.maxConcurrentLoads} loads; its queue (${policy.maxQueuedLoads}) is full or the wait ran out`,
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

/**
 * Wraps a loaded value (or "not found") in a fresh envelope: soft TTL
 * `ttlMs` (or `negativeTtlMs`), hard TTL `+ staleMs`, both × one jitter factor;
 * a {@link LoadResult} overrides the table's policy for this row.
 */
function buildEnvelope(ctx: FlightContext, id: string, result: unknown, deltaMs: number): Envelope {
  const { policy } = ctx;
  let value = result;
  let override: RowPolicy = {};
  if (result instanceof LoadResult) {
    value = result.value;
    override = result.policy;
  }
  const negative = override.negative === true || value === undefined;
  const json = negative ? 'null' : toJson(value);
  if (json === undefined) {
    throw new BadValueError('the loader returned a value that cannot be serialised as JSON', {
      table: ctx.table,
      id,
    });
  }
  const ttlMs = override.ttlMs ?? (negative ? policy.negativeTtlMs : policy.ttlMs);
  const staleMs = negative ? 0 : (override.staleMs ?? policy.staleMs);
  return makeEnvelope(
    ctx.clock.mint(),
    negative ? null : value,
    json,
    ttlMs,
    staleMs,
    deltaMs,
    negative,
    policy,
  );
}

/** An envelope minted now: soft = now + ttlMs·f, hard = soft + staleMs·f, with one jitter factor f. */
export function makeEnvelope(
  version: number,
  value: unknown,
  json: string,
  ttlMs: number,
  staleMs: number,
  deltaMs: number,
  negative: boolean,
  policy: TablePolicy,
): Envelope {
  const f = jitterFactor(policy);
  const softExpiresAt = Date.now() + Math.max(1, Math.round(ttlMs * f));
  return {
    value,
    json,
    version,
    softExpiresAt,
    hardExpiresAt: softExpiresAt + Math.round(staleMs * f),
    deltaMs,
    negative,
  };
}

/** uniform(1, 1 + jitter): spreads expiries so keys written together do not expire together. */
export function jitterFactor(policy: TablePolicy): number {
  return 1 + Math.random() * policy.jitter;
}

/** The hard TTL (Valkey `PX`) of an envelope from `now`, at least 1 ms. */
export function hardTtlMs(envelope: Envelope, now: number): number {
  return Math.max(1, envelope.hardExpiresAt - now);
}

/** Maps anything thrown by a loader to the coded error every waiter receives. */
export function asStoreError(err: unknown, table: string, id: string): EchoStoreError {
  // A source's own failure is a cause, not an answer: it is wrapped like any other.
  if (err instanceof EchoStoreError && !(err instanceof SourceError)) return err;
  // The detail (an origin URL, a driver message) stays in `cause` for the logs;
  // clients only ever see this sentence.
  return new LoadFailedError('the source failed to load the item', { table, id, cause: err });
}
