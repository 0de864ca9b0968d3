/**
 * What a flight is: one in-flight read-or-load of one id, the unit of
 * single-flight, and what its waiters receive. How it runs is `run-flight.ts`.
 */
import type { Logger } from 'pino';
import type { EchoStoreError } from '../errors.js';
import type { TableEvents } from '../l2/events.js';
import type { Envelope } from '../l2/format.js';
import type { L2, WriteAck } from '../l2/scripts.js';
import { bump, type TableCounters, type TableHistograms } from '../metrics.js';
import type { Admission } from '../protection/admission.js';
import type { Epochs } from '../store/epochs.js';
import type { NotFoundConfirmations } from '../store/not-found.js';
import type { TablePolicy } from '../store/policy.js';
import type { FlightTrace } from '../store/tracing.js';
import type { LoadFn, ReadLayer, ReadResult } from '../store/types.js';
import type { VersionClock } from '../store/version-clock.js';

/** A caller waiting for a flight's answer. Settled exactly once, by the owner. */
export interface Waiter {
  resolve(result: ReadResult): void;
  reject(error: Error): void;
  /** Callers this waiter answers (a coalesced miss answers several); 1 when absent. */
  readonly count?: number;
}

/**
 * What a flight reports to its owner in its `landed` message.
 * - `value`: the answer; `refused` means the fill lost its lease (expired, or
 *   cancelled by a write or delete): it answers this flight's waiters but is
 *   not kept in L1. `unconfirmed`: loaded while Valkey was unusable, so
 *   coherence events may have been missed: kept in L1, but re-validated
 *   by its first read once Valkey is usable again.
 * - `error`: every waiter gets this one error (or a stale value, stale-if-error).
 * - `skipped`: a background refresh found another instance refreshing.
 */
export type Outcome =
  | {
      kind: 'value';
      envelope: Envelope;
      layer: 'l2' | 'origin';
      refused: boolean;
      unconfirmed?: true;
    }
  | { kind: 'error'; error: EchoStoreError }
  | { kind: 'skipped'; retryAfterMs: number };

/**
 * One in-flight load of one id. Who writes each field, and when:
 * - `id`: fixed at creation; `abort`: made on its first use (a load, or a forced close).
 * - `waiters`, `callers`: appended to and emptied only by the owner (on
 *   `miss`, `serveStale`, `landed`, close); the runner only reads the length.
 * - `background`: set at creation (no first waiter), and by the owner when it
 *   answered every waiter stale (`serveStale`).
 * - `answered`: set only by the owner, when it answered the waiters before the flight landed
 *   (`loaded`); read by the owner on landing.
 * - `superseded`, `eventsMissed`: set only by the owner (`superseded`: a PUT, DELETE or newer
 *   event of the id; `eventsMissed`: a flush, the subscriber having reconnected); `superseded`
 *   is read by the runner before it writes L2, both by the owner on landing.
 * - `replaceUpTo`, `startVersion`: set by the owner before launch; read-only after.
 */
export class Flight {
  readonly id: string;
  readonly waiters: Waiter[];
  /** The callers the waiters answer (a coalesced miss answers several): what metrics count and `maxWaitersPerFlight` bounds. */
  callers: number;
  #abort: AbortController | undefined;
  /**
   * Nobody waits for this flight's answer (a background refresh, or a flight
   * whose waiters were already answered stale): it never waits on another
   * instance's lease, and its failure is a refresh failure.
   */
  background: boolean;
  /**
   * The waiters were answered, the value put in L1 and the flight ended when the load
   * returned, before the fill landed: a fill not kept takes the row out of L1 again.
   */
  answered = false;
  /** A write or invalidation of this id came after the flight started: it must write nothing. */
  superseded = false;
  /**
   * A flush came while the flight ran (the event subscriber reconnected, so an event of the id
   * may have been missed): its answer goes to its waiters and to L2, where the lease and the mark
   * fence it against any write it did not hear of, but never into L1.
   */
  eventsMissed = false;
  /**
   * Read-your-writes (`Table.getFresh`): answered only by a value Valkey holds fresh or by a load,
   * never by a stale value (served stale or stale-if-error), which may be the row the caller's
   * commit replaced (a change stream in `stale` mode keeps it, stale).
   */
  fresh = false;
  /** A fresh L2 value at or below this version still needs the load (an early refresh replaces it); 0 otherwise. */
  replaceUpTo = 0;
  /** A version minted when the flight started: writes and deletes newer than it supersede it. */
  startVersion = 0;
  /**
   * How many of `waiters` joined before the first purge of the table applied while the flight
   * ran (undefined: none applied). Only they may receive an answer that purge covers; the
   * waiters after them wait for a load that started after it. Set only by the owner.
   */
  beforePurge: number | undefined;

  /** Aborted on load timeout or forced close; the loader's `signal`. Made on first use: most flights never load. */
  get abort(): AbortController {
    this.#abort ??= new AbortController();
    return this.#abort;
  }

  /** @param first the first waiter; none for a background refresh. */
  constructor(id: string, first?: Waiter) {
    this.id = id;
    this.waiters = first === undefined ? [] : [first];
    this.callers = first === undefined ? 0 : (first.count ?? 1);
    this.background = first === undefined;
  }
}

/** Everything a table's flights and writes need; built once per table. */
export interface TableContext {
  /** The table's name (`[a-z0-9_-]{1,64}`). */
  name: string;
  /** The fingerprint of the table's source: a row another source wrote is a miss (`''`: none given). */
  fingerprint: string;
  /** The table's purge epochs (shared by the hit path, the owner and the flights). */
  epochs: Epochs;
  /** Warns that a row of another source was found (at most once a minute; always counted). */
  foreignRow(id: string, fingerprint: string): void;
  /** Chosen once from `coalescing`: whether a miss coalesces onto a running flight or an open miss message (`none`, the drills' baseline, never does). */
  coalesces: boolean;
  policy: TablePolicy;
  load: LoadFn;
  /** The source's own id rule (see `TableOptions.checkId`), checked with the table's. */
  checkId: ((id: string) => void) | undefined;
  /** The table's Valkey commands, each through the breaker. */
  l2: L2;
  /** Wakes waiters on another instance's fill (fleet lease only). */
  events: TableEvents | undefined;
  /** The table's plain counters (mirrored to Prometheus at scrape time). */
  counters: TableCounters;
  /** The table's histograms. */
  metrics: TableHistograms;
  clock: VersionClock;
  /** Admission to the source: the adaptive limit and the delay-bounded queue. */
  admission: Admission;
  /** Which ids with a value were answered "not found", and since when (`confirmNotFoundMs`). */
  notFound: NotFoundConfirmations;
  log: Logger;
  /** This process's monotonic clock, ms, for L1 and flights (injected in tests); Valkey judges its own values on its own clock. */
  now(): number;
  /** Told of lease and admission waits, for the reads' spans; undefined with tracing off. */
  trace?: FlightTrace;
}

/**
 * The answer a caller receives, built from an envelope and the layer that
 * produced it; `coalesced` when the caller attached to another's flight,
 * `stored` when an origin answer was kept in the cache.
 */
export function answerOf(
  envelope: Envelope,
  layer: ReadLayer,
  coalesced: boolean,
  now: number,
  stored = false,
): ReadResult {
  const ttlMs = envelope.softExpiresAt - now;
  const stale = ttlMs <= 0;
  const { version } = envelope;
  if (envelope.negative) return { found: false, layer, coalesced, stale, version, ttlMs, stored };
  return {
    found: true,
    value: envelope.value,
    json: envelope.json,
    layer,
    coalesced,
    stale,
    version,
    ttlMs,
    stored,
  };
}

/**
 * Answers a flight's waiters: the first with `answer(false)`, every later one
 * (they attached to its flight: coalesced) with one shared `answer(true)`,
 * built once.
 */
export function answerAll(
  waiters: readonly Waiter[],
  answer: (coalesced: boolean) => ReadResult,
): void {
  if (waiters.length === 0) return;
  (waiters[0] as Waiter).resolve(answer(false));
  if (waiters.length === 1) return;
  const shared = answer(true);
  for (let i = 1; i < waiters.length; i++) (waiters[i] as Waiter).resolve(shared);
}

/**
 * Takes in Valkey's answer to a write: its version and clock go to the
 * table's version clock, and a refused coherence message is counted
 * (`valkey_errors{op="publish"}`).
 */
export function noteWritten(ctx: TableContext, written: WriteAck): void {
  ctx.clock.wrote(written.version, written.valkeyNowMs);
  if (written.unpublished !== undefined) bump(ctx.counters.valkeyErrors, 'publish');
}
