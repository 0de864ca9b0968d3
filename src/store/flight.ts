import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  BadValueError,
  EchoStoreError,
  LoadFailedError,
  LoadTimeoutError,
  ShedError,
} from '../errors.js';
import type { TableMetrics } from '../metrics.js';
import { decodeEnvelope, type Envelope, encodeEnvelope, toJson } from './envelope.js';
import { valueKey } from './keys.js';
import type { TablePolicy } from './policy.js';
import type { LoadFn, ReadResult } from './types.js';

/** A caller waiting for a flight's answer. Settled exactly once, by the owner. */
export interface Waiter {
  resolve(result: ReadResult): void;
  reject(error: Error): void;
}

/** What a flight reports to its owner in its `landed` message. */
export type Outcome =
  | { kind: 'value'; envelope: Envelope; source: 'l2' | 'source'; loaded: boolean }
  | { kind: 'error'; error: EchoStoreError; loaded: boolean };

/** Counts loader calls running now for one table, against `maxConcurrentLoads`. */
export interface LoadGate {
  active: number;
}

/** Everything a flight needs; built once per table. */
export interface FlightContext {
  table: string;
  policy: TablePolicy;
  load: LoadFn;
  valkey: Redis;
  metrics: TableMetrics;
  mintVersion: () => number;
  gate: LoadGate;
  log: Logger;
}

/**
 * One in-flight load of one id: the unit of single-flight.
 *
 * Ownership of fields: `id` and `abort` are fixed at creation; `waiters` is
 * appended to and read only by the owner; `superseded` is set only by the
 * owner (on `put`/`invalidate`) and read by the flight before it writes L2.
 */
export class Flight {
  readonly id: string;
  readonly waiters: Waiter[];
  /** Aborted on load timeout or forced close; the loader's `signal`. */
  readonly abort = new AbortController();
  /** A write or invalidation of this id came after the flight started: it must write nothing. */
  superseded = false;

  constructor(id: string, first: Waiter) {
    this.id = id;
    this.waiters = [first];
  }
}

/**
 * Runs a flight outside the owner: L2 read, then on a miss the loader, then
 * the L2 write (`SET … PX hardTtl`). Never rejects: every failure becomes an
 * error outcome, so every waiter is settled.
 */
export async function fly(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  let loaded = false;
  try {
    const cached = await readL2(ctx, flight.id);
    if (cached !== undefined) return { kind: 'value', envelope: cached, source: 'l2', loaded };
    if (ctx.gate.active >= ctx.policy.maxConcurrentLoads) {
      ctx.metrics.shed.inc();
      throw new ShedError(
        `table ${ctx.table} already runs ${ctx.policy.maxConcurrentLoads} loads`,
        {
          table: ctx.table,
          id: flight.id,
        },
      );
    }
    loaded = true;
    const started = performance.now();
    const value = await callLoader(ctx, flight);
    const deltaMs = Math.round(performance.now() - started);
    const envelope = buildEnvelope(ctx, flight.id, value, deltaMs);
    await writeL2(ctx, flight, envelope);
    return { kind: 'value', envelope, source: 'source', loaded };
  } catch (err) {
    return { kind: 'error', error: asStoreError(err, ctx.table, flight.id), loaded };
  }
}

/** GET the envelope; a Valkey failure, an undecodable envelope or a stale one is a miss. */
async function readL2(ctx: FlightContext, id: string): Promise<Envelope | undefined> {
  let text: string | null;
  try {
    text = await ctx.valkey.get(valueKey(ctx.table, id));
  } catch (err) {
    ctx.metrics.valkeyErrors('get').inc();
    ctx.log.warn({ err, table: ctx.table }, 'valkey GET failed; loading from the source');
    return undefined;
  }
  if (text === null) return undefined;
  const envelope = decodeEnvelope(text);
  if (envelope === undefined) {
    ctx.metrics.badEnvelopes.inc();
    return undefined;
  }
  // Past its soft TTL: reload in the foreground (serving stale comes with the freshness policy).
  return envelope.softExpiresAt > Date.now() ? envelope : undefined;
}

/**
 * Calls the loader under the table's load gate and `loadTimeoutMs`. The
 * signal belongs to the flight; a result that lands after the timeout is
 * discarded and counted.
 */
async function callLoader(ctx: FlightContext, flight: Flight): Promise<unknown> {
  const { policy, metrics } = ctx;
  ctx.gate.active++;
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
    ctx.gate.active--;
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
      version: ctx.mintVersion(),
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
    version: ctx.mintVersion(),
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

/** `SET key envelope PX hardTtl`, unless the flight was superseded. A failed write still answers the waiters. */
async function writeL2(ctx: FlightContext, flight: Flight, envelope: Envelope): Promise<void> {
  if (flight.superseded) return;
  const now = Date.now();
  try {
    await ctx.valkey.set(
      valueKey(ctx.table, flight.id),
      encodeEnvelope(envelope),
      'PX',
      hardTtlMs(ctx.policy, envelope, now),
    );
  } catch (err) {
    ctx.metrics.valkeyErrors('set').inc();
    ctx.log.warn({ err, table: ctx.table }, 'valkey SET failed; answering without L2');
  }
}

/** Maps anything thrown by a loader to the coded error every waiter receives. */
function asStoreError(err: unknown, table: string, id: string): EchoStoreError {
  if (err instanceof EchoStoreError) return err;
  const detail = err instanceof Error ? err.message : String(err);
  return new LoadFailedError(`the loader failed: ${detail}`, { table, id, cause: err });
}
