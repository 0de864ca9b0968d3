/**
 * A flight: one in-flight read-or-load of one id, run outside the owner.
 * Every waiter of the flight gets its one outcome (single-flight).
 */
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { type EchoStoreError, WaitTimeoutError } from '../errors.js';
import type { TableMetrics } from '../metrics.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from './envelope.js';
import { encodeEvent, type TableEvents } from './events.js';
import { eventsChannel, leaseKey, valueKey } from './keys.js';
import type { LeaseAnswer, LeaseScripts } from './lease.js';
import { asStoreError, hardTtlMs, loadEnvelope } from './loader.js';
import type { TablePolicy } from './policy.js';
import type { LoadFn, ReadResult } from './types.js';

/** A caller waiting for a flight's answer. Settled exactly once, by the owner. */
export interface Waiter {
  resolve(result: ReadResult): void;
  reject(error: Error): void;
}

/**
 * What a flight reports to its owner in its `landed` message. `refused` means
 * the fill lost its lease (expired or invalidated): the value answers this
 * flight's waiters but is not kept in L1.
 */
export type Outcome =
  | {
      kind: 'value';
      envelope: Envelope;
      source: 'l2' | 'source';
      loaded: boolean;
      refused: boolean;
    }
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
  lease: LeaseScripts;
  /** Wakes waiters on another instance's fill; undefined when the table does not use the lease. */
  events: TableEvents | undefined;
  metrics: TableMetrics;
  mintVersion: () => number;
  gate: LoadGate;
  log: Logger;
}

/** Longest pause between two looks at a contended lease when no event wakes the waiter. */
const POLL_MS = 250;

/**
 * One in-flight load of one id: the unit of single-flight.
 *
 * Ownership of fields: `id` and `abort` are fixed at creation; `waiters` is
 * appended to and read only by the owner; `superseded` is set only by the
 * owner (on `put`/`invalidate`) and read by the flight before it writes L2;
 * `loaded` is set by the flight when it calls the loader.
 */
export class Flight {
  readonly id: string;
  readonly waiters: Waiter[];
  /** Aborted on load timeout or forced close; the loader's `signal`. */
  readonly abort = new AbortController();
  /** A write or invalidation of this id came after the flight started: it must write nothing. */
  superseded = false;
  /** The flight called the loader (a source read). */
  loaded = false;

  constructor(id: string, first: Waiter) {
    this.id = id;
    this.waiters = [first];
  }
}

/**
 * Runs a flight: with the fleet lease (`coalescing: 'fleet'`) or plain
 * cache-aside (GET, load on a miss, `SET … PX`). Never rejects: every failure
 * becomes an error outcome, so every waiter is settled.
 */
export async function fly(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  try {
    return ctx.policy.coalescing === 'fleet'
      ? await flyLeased(ctx, flight)
      : await flyPlain(ctx, flight);
  } catch (err) {
    return { kind: 'error', error: asStoreError(err, ctx.table, flight.id), loaded: flight.loaded };
  }
}

async function flyPlain(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  const cached = await readL2(ctx, flight.id);
  if (cached !== undefined) return valueOutcome(flight, cached, 'l2');
  return loadWithoutLease(ctx, flight);
}

/** Loads and writes L2 with a plain SET: no lease (plain regimes, or Valkey unreachable). */
async function loadWithoutLease(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  const envelope = await loadEnvelope(ctx, flight);
  await writeL2(ctx, flight, envelope);
  return valueOutcome(flight, envelope, 'source');
}

/**
 * The fleet path: `readOrLease` until there is a value or this flight holds
 * the lease. A contended flight waits for the holder's fill — woken by its
 * PUBLISH, re-checking at least every {@link POLL_MS} and right when the lease
 * expires (so exactly one waiter takes over a dead holder's lease) — never
 * past `waitTimeoutMs`.
 */
async function flyLeased(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  const { table, policy, metrics } = ctx;
  const vKey = valueKey(table, flight.id);
  const lKey = leaseKey(table, flight.id);
  const watch = ctx.events?.watch(table, flight.id);
  const deadline = Date.now() + policy.waitTimeoutMs;
  let waitStarted: number | undefined;
  const waited = () => {
    if (waitStarted !== undefined)
      metrics.waitSeconds.observe((performance.now() - waitStarted) / 1000);
  };
  try {
    for (;;) {
      let answer: LeaseAnswer;
      try {
        answer = await ctx.lease.readOrLease(vKey, lKey, policy.leaseMs, Date.now());
      } catch (err) {
        // Valkey down or too slow: degraded, the loader runs without the lease.
        // A lease the late script may still take expires after leaseMs.
        metrics.valkeyErrors('lease').inc();
        ctx.log.warn(
          { err, table },
          'valkey lease failed; loading from the source without the lease',
        );
        return await loadWithoutLease(ctx, flight);
      }
      if (answer.kind === 'value') {
        const envelope = decodeEnvelope(answer.text);
        waited();
        if (envelope !== undefined) return valueOutcome(flight, envelope, 'l2');
        metrics.badEnvelopes.inc();
        return await loadWithoutLease(ctx, flight);
      }
      if (answer.kind === 'leased') {
        // An old envelope that is not stale but does not decode is garbage: counted, then overwritten by the fill.
        if (answer.stale !== undefined && decodeEnvelope(answer.stale) === undefined)
          metrics.badEnvelopes.inc();
        metrics.lease(waitStarted === undefined ? 'acquired' : 'takeover').inc();
        waited();
        return await loadAndFill(ctx, flight, vKey, lKey, answer.token);
      }
      if (waitStarted === undefined) {
        waitStarted = performance.now();
        metrics.lease('contended').inc();
      }
      const leftMs = deadline - Date.now();
      if (leftMs <= 0) {
        waited();
        throw new WaitTimeoutError(
          `no fill from the lease holder within ${policy.waitTimeoutMs} ms`,
          {
            table,
            id: flight.id,
          },
        );
      }
      const pauseMs = Math.min(leftMs, answer.remainingMs + 2, POLL_MS);
      if (watch !== undefined) await watch.wait(pauseMs);
      else await new Promise((r) => setTimeout(r, pauseMs));
    }
  } finally {
    watch?.close();
  }
}

/** Holding the lease: load, then `fillAndRelease`; on a failed load, release the lease and wake the waiters. */
async function loadAndFill(
  ctx: FlightContext,
  flight: Flight,
  vKey: string,
  lKey: string,
  token: string,
): Promise<Outcome> {
  const { metrics, table } = ctx;
  const channel = eventsChannel(table);
  let envelope: Envelope;
  try {
    envelope = await loadEnvelope(ctx, flight);
  } catch (err) {
    releaseLease(ctx, lKey, token, flight.id);
    throw err;
  }
  if (flight.superseded) {
    releaseLease(ctx, lKey, token, flight.id);
    return valueOutcome(flight, envelope, 'source');
  }
  let refused = false;
  try {
    const filled = await ctx.lease.fillAndRelease(
      vKey,
      lKey,
      token,
      encodeEnvelope(envelope),
      hardTtlMs(ctx.policy, envelope, Date.now()),
      channel,
      encodeEvent({ k: 'fill', id: flight.id, v: envelope.version }),
    );
    if (!filled) {
      refused = true;
      metrics.lease('lost').inc();
    }
  } catch (err) {
    metrics.valkeyErrors('fill').inc();
    ctx.log.warn({ err, table }, 'valkey fill failed; answering without L2');
  }
  return { kind: 'value', envelope, source: 'source', loaded: flight.loaded, refused };
}

function releaseLease(ctx: FlightContext, lKey: string, token: string, id: string): void {
  const channel = eventsChannel(ctx.table);
  ctx.lease
    .release(lKey, token, channel, encodeEvent({ k: 'release', id }))
    .catch((err: unknown) => {
      ctx.metrics.valkeyErrors('release').inc();
      ctx.log.warn(
        { err, table: ctx.table },
        'valkey lease release failed; it expires after leaseMs',
      );
    });
}

function valueOutcome(flight: Flight, envelope: Envelope, source: 'l2' | 'source'): Outcome {
  return { kind: 'value', envelope, source, loaded: flight.loaded, refused: false };
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

/** `SET key envelope PX hardTtl`, unless the flight was superseded. A failed write still answers the waiters. */
async function writeL2(ctx: FlightContext, flight: Flight, envelope: Envelope): Promise<void> {
  if (flight.superseded) return;
  try {
    await ctx.valkey.set(
      valueKey(ctx.table, flight.id),
      encodeEnvelope(envelope),
      'PX',
      hardTtlMs(ctx.policy, envelope, Date.now()),
    );
  } catch (err) {
    ctx.metrics.valkeyErrors('set').inc();
    ctx.log.warn({ err, table: ctx.table }, 'valkey SET failed; answering without L2');
  }
}
