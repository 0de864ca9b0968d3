/**
 * A flight: one in-flight read-or-load of one id, run outside the owner.
 * Every waiter of the flight gets its one outcome (single-flight).
 */
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { type EchoStoreError, WaitTimeoutError } from '../errors.js';
import type { TableMetrics } from '../metrics.js';
import { decodeEnvelope, type Envelope, encodeEnvelope, type VersionClock } from './envelope.js';
import { encodeEvent, type TableEvents } from './events.js';
import type { LoadGate } from './gate.js';
import type { ValkeyHealth } from './health.js';
import { eventsChannel, leaseKey, valueKey } from './keys.js';
import { type EventTarget, type LeaseAnswer, type LeaseScripts, readMark } from './lease.js';
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
 * the fill lost its lease (expired, or cancelled by a write or delete): the
 * value answers this flight's waiters but is not kept in L1.
 */
export type Outcome =
  | {
      kind: 'value';
      envelope: Envelope;
      source: 'l2' | 'source';
      loaded: boolean;
      refused: boolean;
    }
  | { kind: 'error'; error: EchoStoreError; loaded: boolean }
  /** A background refresh found another instance refreshing: nothing to do. */
  | { kind: 'skipped'; loaded: false; retryAfterMs: number };

/** Everything a flight needs; built once per table. */
export interface FlightContext {
  table: string;
  policy: TablePolicy;
  load: LoadFn;
  valkey: Redis;
  lease: LeaseScripts;
  health: ValkeyHealth;
  /** Wakes waiters on another instance's fill; undefined when the table does not use the lease. */
  events: TableEvents | undefined;
  metrics: TableMetrics;
  clock: VersionClock;
  gate: LoadGate;
  log: Logger;
  /**
   * The flight found a stale value it may serve and will load behind it:
   * the owner answers the waiters with `envelope` now (stale-while-revalidate).
   */
  early(flight: Flight, envelope: Envelope): void;
}

/** Longest pause between two looks at a contended lease when no event wakes the waiter. */
const POLL_MS = 250;
/** Shortest such pause: a lease about to expire is looked at again, but never in a tight loop. */
const MIN_POLL_MS = 10;

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
  /**
   * Nobody waits for this flight's answer (a background refresh, or a flight
   * whose waiters were already answered stale): it never waits on another
   * instance's lease, and its failure is a refresh failure.
   */
  background = false;
  /** For a refresh: the version to replace (a fresh L2 value no newer than this still needs the load); 0 otherwise. */
  replaceVersion = 0;
  /** A version minted when the flight started: writes and deletes newer than it supersede it. */
  startVersion = 0;

  /** @param first the first waiter; none for a background refresh. */
  constructor(id: string, first?: Waiter) {
    this.id = id;
    this.waiters = first === undefined ? [] : [first];
    this.background = first === undefined;
  }
}

/**
 * Runs a flight: with the fleet lease (`coalescing: 'fleet'`), plain
 * cache-aside (GET, load on a miss, compare-and-set fill), or — while Valkey is
 * unusable — straight from the source. Never rejects: every failure becomes an
 * error outcome, so every waiter is settled.
 */
export async function fly(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  try {
    if (!ctx.health.usable()) return await loadDegraded(ctx, flight, undefined);
    return ctx.policy.coalescing === 'fleet'
      ? await flyLeased(ctx, flight)
      : await flyPlain(ctx, flight);
  } catch (err) {
    return { kind: 'error', error: asStoreError(err, ctx.table, flight.id), loaded: flight.loaded };
  }
}

async function flyPlain(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  let text: string | null;
  try {
    text = await ctx.valkey.get(valueKey(ctx.table, flight.id));
    ctx.health.succeeded();
  } catch (err) {
    // A key of another type is garbage to overwrite, not a sick server.
    if (!isReplyError(err)) return loadDegraded(ctx, flight, err);
    ctx.metrics.badEnvelopes.inc();
    text = null;
  }
  const cached = text === null ? undefined : decode(ctx, text);
  if (
    cached !== undefined &&
    cached.softExpiresAt > Date.now() &&
    cached.version > flight.replaceVersion
  )
    return valueOutcome(flight, cached, 'l2');
  if (cached !== undefined && servableStale(cached)) serveStale(ctx, flight, cached);
  const loaded = await loadEnvelope(ctx, flight);
  const version = await fillWithoutLease(ctx, flight, loaded, readMark(text));
  const envelope = version === undefined ? loaded : { ...loaded, version };
  return {
    kind: 'value',
    envelope,
    source: 'source',
    loaded: flight.loaded,
    refused: version === undefined,
  };
}

/**
 * Valkey failed (`err`) or the circuit is open (`err` undefined): load from the
 * source without the lease. The fill is sent without waiting for it, and only
 * as "set if absent", so it can never overwrite a write that Valkey holds but
 * this instance could not see; a lease a late script may still take expires
 * after `leaseMs`.
 */
async function loadDegraded(ctx: FlightContext, flight: Flight, err: unknown): Promise<Outcome> {
  if (err !== undefined) {
    ctx.health.failed(err);
    ctx.metrics.valkeyErrors(ctx.policy.coalescing === 'fleet' ? 'lease' : 'get').inc();
    ctx.log.debug({ err, table: ctx.table }, 'valkey read failed; loading from the source');
  }
  const envelope = await loadEnvelope(ctx, flight);
  if (ctx.health.usable()) void fillWithoutLease(ctx, flight, envelope, '');
  return valueOutcome(flight, envelope, 'source');
}

/**
 * Writes a fill with `fillIfUnchanged`.
 *
 * @returns the version Valkey wrote it at, or undefined when it was refused or
 *   failed (failures are counted, never thrown).
 */
async function fillWithoutLease(
  ctx: FlightContext,
  flight: Flight,
  envelope: Envelope,
  expected: string,
): Promise<number | undefined> {
  if (flight.superseded) return undefined;
  try {
    const version = await ctx.lease.fillIfUnchanged(
      valueKey(ctx.table, flight.id),
      expected,
      encodeEnvelope(envelope),
      hardTtlMs(envelope, Date.now()),
      eventTarget(ctx, flight.id),
    );
    ctx.health.succeeded();
    if (version !== undefined) ctx.clock.observe(version);
    return version;
  } catch (err) {
    ctx.health.failed(err);
    ctx.metrics.valkeyErrors('set').inc();
    ctx.log.debug({ err, table: ctx.table }, 'valkey fill failed; answering without L2');
    return undefined;
  }
}

/** The table's channel and the JSON-encoded id, for the scripts' coherence messages. */
export function eventTarget(ctx: FlightContext, id: string): EventTarget {
  return { channel: eventsChannel(ctx.table), idJson: JSON.stringify(id) };
}

/** An error Valkey answered (WRONGTYPE, a script error): about the data, not the server's health. */
export function isReplyError(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError';
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
  // An early refresh must replace the version it was asked about, even while that is fresh.
  let replaceUpTo = flight.replaceVersion;
  const waited = () => {
    if (waitStarted !== undefined)
      metrics.waitSeconds.observe((performance.now() - waitStarted) / 1000);
  };
  try {
    for (;;) {
      let answer: LeaseAnswer;
      try {
        answer = await ctx.lease.readOrLease(vKey, lKey, policy.leaseMs, Date.now(), replaceUpTo);
        ctx.health.succeeded();
      } catch (err) {
        return await loadDegraded(ctx, flight, err);
      }
      if (answer.kind === 'value') {
        const envelope = decode(ctx, answer.text);
        if (envelope !== undefined) {
          waited();
          return valueOutcome(flight, envelope, 'l2');
        }
        // Its header looked fresh but it does not decode: compete for the lease to overwrite it.
        replaceUpTo = Number.MAX_SAFE_INTEGER;
        continue;
      }
      const stale = answer.stale === undefined ? undefined : decode(ctx, answer.stale);
      if (answer.kind === 'leased') {
        metrics.lease(waitStarted === undefined ? 'acquired' : 'takeover').inc();
        waited();
        if (stale !== undefined && servableStale(stale)) serveStale(ctx, flight, stale);
        return await loadAndFill(ctx, flight, vKey, lKey, answer.token);
      }
      // Contended: another instance loads. A refresh has nothing to wait for, and a
      // reader with a stale value in hand is answered with it (stale-while-revalidate).
      // (Waiters may have attached to a refresh since it started: then it waits like any flight.)
      if (flight.waiters.length === 0) {
        return { kind: 'skipped', loaded: false, retryAfterMs: answer.remainingMs };
      }
      if (stale !== undefined && servableStale(stale)) {
        waited();
        return valueOutcome(flight, stale, 'l2');
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
      const pauseMs = Math.min(leftMs, Math.max(MIN_POLL_MS, answer.remainingMs + 2), POLL_MS);
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
    const version = await ctx.lease.fillAndRelease(
      vKey,
      lKey,
      token,
      encodeEnvelope(envelope),
      hardTtlMs(envelope, Date.now()),
      eventTarget(ctx, flight.id),
    );
    ctx.health.succeeded();
    if (version === undefined) {
      refused = true;
      metrics.lease('lost').inc();
    } else {
      // Valkey may have ordered it above a newer version it held: answer what it stored.
      envelope = { ...envelope, version };
      ctx.clock.observe(version);
    }
  } catch (err) {
    ctx.health.failed(err);
    metrics.valkeyErrors('fill').inc();
    ctx.log.debug({ err, table }, 'valkey fill failed; answering without L2');
  }
  return { kind: 'value', envelope, source: 'source', loaded: flight.loaded, refused };
}

function releaseLease(ctx: FlightContext, lKey: string, token: string, id: string): void {
  const channel = eventsChannel(ctx.table);
  ctx.lease
    .release(lKey, token, channel, encodeEvent({ k: 'release', id }))
    .catch((err: unknown) => {
      ctx.metrics.valkeyErrors('release').inc();
      ctx.log.debug(
        { err, table: ctx.table },
        'valkey lease release failed; it expires after leaseMs',
      );
    });
}

/** A stale value may be served while it is within its hard TTL; "not found" never is. */
function servableStale(envelope: Envelope): boolean {
  return !envelope.negative && envelope.hardExpiresAt > Date.now();
}

/** Answers the flight's waiters with `stale` now; the flight goes on loading in the background. */
function serveStale(ctx: FlightContext, flight: Flight, stale: Envelope): void {
  if (flight.background) return;
  ctx.early(flight, stale);
}

/** Decodes an L2 envelope and lets the version clock observe it; counts the undecodable. */
function decode(ctx: FlightContext, text: string): Envelope | undefined {
  const envelope = decodeEnvelope(text);
  if (envelope === undefined) ctx.metrics.badEnvelopes.inc();
  else ctx.clock.observe(envelope.version);
  return envelope;
}

function valueOutcome(flight: Flight, envelope: Envelope, source: 'l2' | 'source'): Outcome {
  return { kind: 'value', envelope, source, loaded: flight.loaded, refused: false };
}
