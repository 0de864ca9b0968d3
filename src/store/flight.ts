/**
 * A flight: one in-flight read-or-load of one id, run outside the owner.
 * Every waiter of the flight gets its one outcome (single-flight).
 */
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { EchoStoreError } from '../errors.js';
import type { TableMetrics } from '../metrics.js';
import { decodeEnvelope, type Envelope, type VersionClock } from './envelope.js';
import type { TableEvents } from './events.js';
import type { LoadGate } from './gate.js';
import type { ValkeyHealth } from './health.js';
import { eventsChannel } from './keys.js';
import type { EventTarget, LeaseScripts } from './lease.js';
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

/** The table's channel and the JSON-encoded id, for the scripts' coherence messages. */
export function eventTarget(ctx: FlightContext, id: string): EventTarget {
  return { channel: eventsChannel(ctx.table), idJson: JSON.stringify(id) };
}

/** An error Valkey answered (WRONGTYPE, a script error): about the data, not the server's health. */
export function isReplyError(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError';
}

/** A stale value may be served while it is within its hard TTL; "not found" never is. */
export function servableStale(envelope: Envelope): boolean {
  return !envelope.negative && envelope.hardExpiresAt > Date.now();
}

/** Answers the flight's waiters with `stale` now; the flight goes on loading in the background. */
export function serveStale(ctx: FlightContext, flight: Flight, stale: Envelope): void {
  if (flight.background) return;
  ctx.early(flight, stale);
}

/** Decodes an L2 envelope and lets the version clock observe it; counts the undecodable. */
export function decode(ctx: FlightContext, text: string): Envelope | undefined {
  const envelope = decodeEnvelope(text);
  if (envelope === undefined) ctx.metrics.badEnvelopes.inc();
  else ctx.clock.observe(envelope.version);
  return envelope;
}

export function valueOutcome(flight: Flight, envelope: Envelope, source: 'l2' | 'source'): Outcome {
  return { kind: 'value', envelope, source, loaded: flight.loaded, refused: false };
}
