/**
 * The actor that owns one table's state, as EchoStore's `table.ex`: its public
 * surface, then its message handlers, then internals.
 *
 * Invariants:
 * - Only a handler changes `#flights`, the write book or L1-after-load; async
 *   work (Valkey, the loader) runs outside and reports back with a message
 *   (`landed` is the flight's one way back).
 * - A flight is removed by identity, never just by key.
 * - Every waiter is settled exactly once: by its flight's outcome, by its
 *   write's acknowledgement, by `ECC_INTERNAL` when a handler throws, or by
 *   `ECC_CLOSED` on forced shutdown.
 */
import { LRUCache } from 'lru-cache';
import { ClosedError, type EchoStoreError, InternalError, ShedError } from '../errors.js';
import type { TableEvent } from '../l2/events.js';
import type { Envelope } from '../l2/format.js';
import { bump } from '../metrics.js';
import { rowAnswer } from '../store/answers.js';
import { HARD_PURGED, NOT_PURGED, type Purge, SOFT_PURGED } from '../store/epochs.js';
import { RefreshBackoff } from '../store/freshness.js';
import type { L1 } from '../store/l1.js';
import {
  answerAll,
  answerOf,
  Flight,
  type Outcome,
  type TableContext,
  type Waiter,
} from './flight.js';
import { Mailbox } from './mailbox.js';
import { type Message, type Miss, type RefreshReason, waitersOf } from './messages.js';
import { type FlightReports, type FlightRunner, flightRunner } from './run-flight.js';
import { Writes } from './writes.js';

type PurgeMessage = Extract<Message, { kind: 'purge' }>;
type PurgedMessage = Extract<Message, { kind: 'purged' }>;

type Handlers = { [K in Message['kind']]: (m: Extract<Message, { kind: K }>) => void };

/** Builds the runner of a table's flights (tests pass a fake one). */
export type RunnerFactory = (ctx: TableContext, reports: FlightReports) => FlightRunner;

export class TableOwner {
  readonly #ctx: TableContext;
  readonly #l1: L1;
  readonly #mailbox: Mailbox<Message>;
  readonly #run: FlightRunner;
  readonly #flights = new Map<string, Flight>();
  /**
   * Flights answered when their load returned (`#loaded`) whose fill has not landed yet, each
   * with the version it put in L1.
   */
  readonly #filling = new Map<Flight, number>();
  readonly #writes: Writes;
  readonly #backoff = new RefreshBackoff();
  /**
   * Ids whose L1 row was loaded while Valkey was unusable (coherence events may
   * have been missed meanwhile): the first read of one once Valkey is usable
   * again re-validates it (`revalidate` refresh). Bounded like L1.
   */
  readonly #unconfirmed: LRUCache<string, true>;
  #closed = false;
  #idle: (() => void) | undefined;

  /** @param runner how flights run; the real one unless a test passes a fake. */
  constructor(ctx: TableContext, l1: L1, runner: RunnerFactory = flightRunner) {
    this.#ctx = ctx;
    this.#l1 = l1;
    // Bounded by maxSize, not max: lru-cache preallocates arrays for `max` entries
    // (l1.maxEntries is a million by default), and this set is usually empty.
    this.#unconfirmed = new LRUCache<string, true>({
      maxSize: ctx.policy.l1.maxEntries,
      sizeCalculation: () => 1,
    });
    this.#mailbox = new Mailbox<Message>(
      (m) => this.#handle(m),
      (m, err) => this.#failed(m, err),
      () => this.#checkIdle(),
    );
    this.#run = runner(ctx, {
      serveStale: (flight, envelope) => this.post({ kind: 'serveStale', flight, envelope }),
      loaded: (flight, envelope) => this.post({ kind: 'loaded', flight, envelope }),
    });
    this.#writes = new Writes(
      ctx,
      l1,
      (m) => this.post(m),
      (m) => this.#handleSafely(m),
    );
  }

  // --- public surface -------------------------------------------------------

  /** Queues a message; the mailbox is drained on a microtask, one message at a time. */
  post(message: Message): void {
    this.#mailbox.post(message);
  }

  /** Messages waiting to be handled. */
  get mailboxDepth(): number {
    return this.#mailbox.depth;
  }

  /** Flights in progress. */
  get flights(): number {
    return this.#flights.size;
  }

  /**
   * Whether the L1 row of `id` was loaded while Valkey was unusable and is
   * not re-validated yet. Read-only; costs a size check while there is none.
   */
  unconfirmed(id: string): boolean {
    return this.#unconfirmed.size > 0 && this.#unconfirmed.has(id);
  }

  /**
   * Whether a stale or early read of `id` should ask for a refresh now: no
   * flight or write of it runs and it is not backing off after a failure.
   * Read-only, so callers may ask it without a mailbox hop.
   */
  wantsRefresh(id: string, now: number): boolean {
    return (
      !this.#closed &&
      !this.#flights.has(id) &&
      !this.#writes.has(id) &&
      this.#backoff.mayRetry(id, now)
    );
  }

  /**
   * Stops taking work and waits for running flights and writes to settle, at
   * most `graceMs`, and while a write is in flight at least until its deadline
   * in Valkey has passed (`l2.writeDeadlineMs`, at most 5 s); then aborts the
   * loads still running and fails their waiters, the writes still unanswered
   * and every parked message's, with `ECC_CLOSED`. So a write whose caller is
   * told it failed cannot land in Valkey after that.
   */
  async close(graceMs: number): Promise<void> {
    this.#closed = true;
    if (!this.#busy()) return;
    const idle = new Promise<void>((resolve) => {
      this.#idle = resolve;
    });
    const waitMs =
      this.#writes.size > 0 ? Math.max(graceMs, this.#ctx.l2.writeDeadlineMs) : graceMs;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), waitMs);
    });
    const result = await Promise.race([idle, deadline]);
    clearTimeout(timer);
    if (result !== 'timeout') return;
    for (const flight of this.#flights.values()) {
      const error = this.#closedError(flight.id);
      flight.abort.abort(error);
      for (const w of flight.waiters) w.reject(error);
      flight.waiters.length = 0;
      flight.callers = 0;
    }
    this.#flights.clear();
    for (const [id, parked] of this.#writes.drain()) {
      for (const m of parked) for (const w of waitersOf(m)) w.reject(this.#closedError(id));
    }
  }

  // --- handlers: one per message kind ---------------------------------------

  readonly #handlers: Handlers = {
    miss: (m) => this.#miss(m),
    landed: (m) => this.#landed(m.flight, m.outcome),
    serveStale: (m) => this.#serveStale(m.flight, m.envelope),
    loaded: (m) => this.#loaded(m.flight, m.envelope),
    refresh: (m) => this.#refresh(m.id, m.reason),
    put: (m) => this.#write(m, () => this.#writes.put(m)),
    written: (m) => this.#writes.written(m),
    invalidate: (m) => this.#write(m, () => this.#writes.invalidate(m)),
    invalidated: (m) => this.#writes.invalidated(m),
    purge: (m) => this.#purge(m),
    purged: (m) => this.#purged(m),
    event: (m) => this.#event(m.event),
    flush: () => {
      // Events may have been missed: no L1 row, and no purge epoch, is proven current.
      this.#l1.clear();
      this.#unconfirmed.clear();
      this.#ctx.epochs.unprove();
      this.#ctx.counters.l1Flushes++;
      // A flight running now may have missed an event too: its answer goes to its waiters and
      // to L2 (fenced there by the lease and the mark), not into L1; later misses launch anew.
      for (const flight of this.#flights.values()) flight.eventsMissed = true;
      this.#flights.clear();
    },
  };

  #handle(m: Message): void {
    (this.#handlers[m.kind] as (m: Message) => void)(m);
  }

  /** A parked message replayed after its write: one that throws fails alone. */
  #handleSafely(m: Message): void {
    try {
      this.#handle(m);
    } catch (err) {
      this.#failed(m, err);
    }
  }

  /** A miss: answer from L1 if it filled meanwhile, else coalesce onto the id's flight or launch one. */
  #miss(m: Miss): void {
    m.open = false;
    const { id, waiter, coalesced } = m;
    if (this.#closed) {
      for (const w of waitersOf(m)) w.reject(this.#closedError(id));
      return;
    }
    if (this.#writes.park(id, m)) return;
    if (m.fresh === true) {
      this.#l1.delete(id);
      this.#supersede(id);
    }
    const callers = 1 + (coalesced?.count ?? 0);
    const now = this.#ctx.now();
    let row = this.#l1.get(id, now);
    const purge = row === undefined ? 0 : this.#ctx.epochs.judge(row.born, row.tags);
    if (purge === HARD_PURGED) {
      this.#l1.delete(id);
      this.#ctx.counters.purgedRows.hard++;
      row = undefined;
    }
    if (row !== undefined) {
      const stale = now >= row.softExpiresAt || purge === SOFT_PURGED;
      this.#ctx.counters.reads[row.negative ? 'negative' : stale ? 'stale' : 'l1'] += callers;
      const answer = rowAnswer(row, now, false, purge === SOFT_PURGED);
      waiter.resolve(answer);
      coalesced?.resolve(answer);
      if (stale) this.#refresh(id, purge === SOFT_PURGED ? 'purge' : 'stale');
      return;
    }
    const running = this.#ctx.coalesces ? this.#flights.get(id) : undefined;
    if (running === undefined) {
      const flight = new Flight(id, waiter);
      flight.fresh = m.fresh === true;
      if (coalesced !== undefined) this.#coalesce(flight, coalesced);
      this.#launch(flight);
      return;
    }
    this.#coalesce(running, waiter);
    if (coalesced !== undefined) this.#coalesce(running, coalesced);
  }

  /** Coalesces `waiter` onto a running flight, unless `maxWaitersPerFlight` callers wait on it already. */
  #coalesce(flight: Flight, waiter: Waiter): void {
    const count = waiter.count ?? 1;
    if (flight.callers + count > this.#ctx.policy.maxWaitersPerFlight) {
      this.#ctx.counters.shed += count;
      waiter.reject(
        new ShedError(`${flight.callers} callers already wait on this item`, {
          table: this.#ctx.name,
          id: flight.id,
        }),
      );
      return;
    }
    flight.waiters.push(waiter);
    flight.callers += count;
    this.#ctx.counters.coalesced += count;
  }

  /** A flight finished: answer every waiter with its one outcome, and keep it in L1 if it may. */
  #landed(flight: Flight, outcome: Outcome): void {
    if (flight.answered) {
      this.#filled(flight, outcome);
      return;
    }
    if (this.#flights.get(flight.id) === flight) this.#flights.delete(flight.id);
    const { counters } = this.#ctx;
    const now = this.#ctx.now();
    if (outcome.kind === 'skipped') {
      // Another instance refreshes: do not ask again before its lease runs out
      // (its fill event will drop our row sooner).
      this.#backoff.pause(flight.id, now + outcome.retryAfterMs);
      // Callers that attached after the flight decided to skip still need an
      // answer, superseded or not: they join the id's flight, or launch one.
      if (flight.waiters.length > 0) this.#relaunch(flight);
      return;
    }
    if (outcome.kind === 'error') {
      bump(counters.loadErrors, outcome.error.code);
      if (flight.background) {
        counters.refreshFailures++;
        this.#backoff.failed(flight.id, now);
      }
      this.#answerError(flight, outcome.error, now);
      return;
    }
    this.#backoff.succeeded(flight.id);
    const { layer } = outcome;
    let { envelope } = outcome;
    if (layer === 'l2') counters.l2_hits++;
    // A purge applied while the flight ran may cover its answer (a load that started before it).
    const purge = this.#ctx.epochs.judge(envelope.born ?? 0, envelope.tags);
    if (purge === HARD_PURGED) {
      this.#answerBeforePurge(flight, envelope, layer, now);
      return;
    }
    if (purge === SOFT_PURGED) envelope = staleNow(envelope, now);
    const written = !flight.superseded && !outcome.refused;
    const kept = written && !flight.eventsMissed;
    if (kept) {
      this.#l1.set(flight.id, envelope, now);
      if (outcome.unconfirmed === true) this.#unconfirmed.set(flight.id, true);
      else this.#unconfirmed.delete(flight.id);
    }
    counters.reads[envelope.negative ? 'negative' : purge === SOFT_PURGED ? 'stale' : layer] +=
      flight.callers;
    const stored = written && layer === 'origin';
    answerAll(flight.waiters, (coalesced) => answerOf(envelope, layer, coalesced, now, stored));
    if (purge === SOFT_PURGED && kept) this.#refresh(flight.id, 'purge');
  }

  /**
   * A flight's answer that a purge applied while it ran covers: the waiters that joined before
   * the purge get it (they asked before it answered), the later ones wait for a load that
   * starts now; nothing goes into L1.
   */
  #answerBeforePurge(flight: Flight, envelope: Envelope, layer: 'l2' | 'origin', now: number) {
    const early = flight.waiters.splice(0, flight.beforePurge ?? flight.waiters.length);
    const earlyCallers = early.reduce((n, w) => n + (w.count ?? 1), 0);
    this.#ctx.counters.reads[envelope.negative ? 'negative' : layer] += earlyCallers;
    answerAll(early, (coalesced) => answerOf(envelope, layer, coalesced, now, false));
    flight.callers -= earlyCallers;
    if (flight.waiters.length > 0) this.#relaunch(flight);
  }

  /**
   * A lease holder's load returned and its fill is sent, at the version `envelope` carries:
   * keep it in L1, answer the waiters and end the flight now, as landing would once the fill
   * is kept (the answer needs nothing the fill returns). Left to landing when it would judge
   * otherwise: the flight superseded or past a flush, or a purge applied while it ran. The
   * next flight of the id asks Valkey after the fill, on the same connection. The fill's
   * landing ({@link #filled}) takes the row out of L1 again if the fill was refused, so the
   * refused value answers until then, as it always answered callers that joined the load.
   */
  #loaded(flight: Flight, envelope: Envelope): void {
    if (flight.superseded || flight.eventsMissed || flight.waiters.length === 0) return;
    if (flight.beforePurge !== undefined) return;
    if (this.#ctx.epochs.judge(envelope.born ?? 0, envelope.tags) !== NOT_PURGED) return;
    if (this.#flights.get(flight.id) === flight) this.#flights.delete(flight.id);
    this.#filling.set(flight, envelope.version);
    flight.answered = true;
    const now = this.#ctx.now();
    this.#backoff.succeeded(flight.id);
    this.#l1.set(flight.id, envelope, now);
    this.#unconfirmed.delete(flight.id);
    this.#ctx.counters.reads[envelope.negative ? 'negative' : 'origin'] += flight.callers;
    answerAll(flight.waiters, (coalesced) => answerOf(envelope, 'origin', coalesced, now, true));
    flight.waiters.length = 0;
    flight.callers = 0;
  }

  /**
   * The fill of a flight answered when its load returned ({@link #loaded}) landed: one that was
   * not kept (refused, or its outcome unknown) takes its row out of L1, unless something newer
   * replaced it.
   */
  #filled(flight: Flight, outcome: Outcome): void {
    const version = this.#filling.get(flight);
    this.#filling.delete(flight);
    if (outcome.kind === 'value' && !outcome.refused) return;
    if (this.#l1.peek(flight.id)?.version === version) this.#l1.delete(flight.id);
  }

  /** A flight holds a stale value: answer its waiters now; the flight goes on as a refresh. */
  #serveStale(flight: Flight, stale: Envelope): void {
    if (flight.superseded || flight.eventsMissed || flight.waiters.length === 0) return;
    const purge = this.#ctx.epochs.judge(stale.born ?? 0, stale.tags);
    // Hard-purged since the flight read it: never served; the flight's load answers.
    if (purge === HARD_PURGED) return;
    const now = this.#ctx.now();
    const envelope = purge === SOFT_PURGED ? staleNow(stale, now) : stale;
    // In L1, later callers get the stale value without the mailbox while the refresh runs.
    this.#l1.set(flight.id, envelope, now);
    this.#unconfirmed.delete(flight.id);
    this.#ctx.counters.reads.stale += flight.callers;
    this.#ctx.counters.refreshes.stale++;
    answerAll(flight.waiters, (coalesced) => answerOf(envelope, 'l2', coalesced, now));
    flight.waiters.length = 0;
    flight.callers = 0;
    flight.background = true;
  }

  /** A background refresh, unless one runs, a write is in flight, or the id backs off. */
  #refresh(id: string, reason: RefreshReason): void {
    if (!this.wantsRefresh(id, this.#ctx.now())) return;
    this.#ctx.counters.refreshes[reason]++;
    const flight = new Flight(id);
    // A row loaded while Valkey was unusable yields to whatever Valkey holds fresh (the fleet's value).
    flight.replaceUpTo = this.unconfirmed(id) ? 0 : (this.#l1.peek(id)?.version ?? 0);
    this.#launch(flight);
  }

  /**
   * A purge: the epochs in Valkey (and the event), then, acknowledged, in memory. Refused once
   * closed. The entry point of every invalidation by tag or table (a change stream's too).
   */
  #purge(m: PurgeMessage): void {
    if (this.#closed) {
      m.waiter.reject(new ClosedError('the store is shutting down', { table: this.#ctx.name }));
      return;
    }
    this.#ctx.l2.purge(m.scope).then(
      (ack) => this.post({ kind: 'purged', scope: m.scope, ack, waiter: m.waiter }),
      (error: unknown) => this.post({ kind: 'purged', scope: m.scope, error, waiter: m.waiter }),
    );
  }

  /** Valkey answered a purge: this instance applies it before the caller hears, so it never serves a purged row after. */
  #purged(m: PurgedMessage): void {
    const { ack, scope } = m;
    if (ack === undefined) {
      m.waiter.reject(this.#writes.valkeyError('purge', undefined, m.error));
      return;
    }
    this.#ctx.clock.sawValkeyTime(ack.valkeyNowMs);
    if (ack.unpublished !== undefined) {
      bump(this.#ctx.counters.valkeyErrors, 'publish');
      this.#ctx.log.warn(
        { refusal: ack.unpublished },
        'purged, but valkey refused the purge event: other instances may serve purged rows from L1 until their L1 TTL',
      );
    }
    this.#applyPurge({ epoch: ack.epoch, soft: scope.soft, tags: scope.tags });
    const kind =
      `${scope.soft ? 'soft' : 'hard'}_${scope.tags === undefined ? 'table' : 'tags'}` as const;
    this.#ctx.counters.purges[kind]++;
    m.waiter.resolve({ epoch: ack.epoch });
  }

  /**
   * Takes in a purge (this instance's, or another's event): the epochs every read judges by,
   * and a mark on each running flight, whose later waiters must not get an answer it covers.
   */
  #applyPurge(purge: Purge): void {
    this.#ctx.epochs.apply(purge);
    for (const flight of this.#flights.values()) flight.beforePurge ??= flight.waiters.length;
  }

  /** Coherence: drop this instance's L1 row when the event is newer than it (newer-wins). */
  #event(event: TableEvent): void {
    if (event.k === 'purge') {
      // A planted epoch far ahead would make every row loaded until then immune to purges.
      if (event.v === undefined || !this.#ctx.clock.plausible(event.v)) return;
      this.#applyPurge({ epoch: event.v, soft: event.soft === true, tags: event.tags });
      return;
    }
    if (event.v === undefined || event.k === 'release') return;
    this.#writes.noteEvent(event.id, event.v);
    // A write or delete elsewhere, newer than a flight of ours: its fill is refused
    // (the lease was cancelled), and callers arriving now must not get its answer.
    const flight = this.#flights.get(event.id);
    if (flight !== undefined && event.k !== 'fill' && event.v > flight.startVersion) {
      this.#supersede(event.id);
    }
    const row = this.#l1.peek(event.id);
    if (row === undefined) return;
    if (event.v > row.version) {
      this.#l1.delete(event.id);
      this.#unconfirmed.delete(event.id);
      this.#ctx.counters.coherence.applied++;
    } else {
      this.#ctx.counters.coherence.stale++;
    }
  }

  /** A handler threw (a bug): its callers get `ECC_INTERNAL`, and nothing it held stays stuck. */
  #failed(m: Message, err: unknown): void {
    const id = 'id' in m ? m.id : 'flight' in m ? m.flight.id : undefined;
    this.#ctx.log.error({ err, kind: m.kind }, 'table owner handler failed');
    const error = new InternalError('internal error in the table owner', {
      table: this.#ctx.name,
      ...(id === undefined ? {} : { id }),
      cause: err,
    });
    if ('flight' in m && this.#flights.get(m.flight.id) === m.flight) {
      this.#flights.delete(m.flight.id);
    }
    for (const w of waitersOf(m)) w.reject(error);
    if ('flight' in m) {
      m.flight.waiters.length = 0;
      m.flight.callers = 0;
    }
    // A write whose handler failed must not keep its id parked for good.
    if ((m.kind === 'written' || m.kind === 'invalidated') && this.#writes.has(m.id)) {
      for (const parked of this.#writes.abandon(m.id)) this.post(parked);
    }
  }

  // --- internals ------------------------------------------------------------

  #launch(flight: Flight): void {
    flight.startVersion = this.#ctx.clock.last;
    this.#flights.set(flight.id, flight);
    this.#run(flight).then(
      (outcome) => this.post({ kind: 'landed', flight, outcome }),
      // The runner never rejects by contract; if it does, every waiter still hears.
      (err: unknown) =>
        this.post({
          kind: 'landed',
          flight,
          outcome: {
            kind: 'error',
            error: new InternalError('internal error in a flight', {
              table: this.#ctx.name,
              id: flight.id,
              cause: err,
            }),
          },
        }),
    );
  }

  /** Waiters of a flight that ended without an answer for them: the id's running flight, or a new one. */
  #relaunch(ended: Flight): void {
    const running = this.#flights.get(ended.id);
    const flight = running ?? new Flight(ended.id);
    flight.waiters.push(...ended.waiters);
    flight.callers += ended.callers;
    if (running === undefined) {
      flight.background = false;
      flight.fresh = ended.fresh;
      this.#launch(flight);
    }
  }

  /** Stale-if-error: a row still within its hard TTL answers instead of the error. */
  #answerError(flight: Flight, error: EchoStoreError, now: number): void {
    const row = flight.superseded ? undefined : this.#l1.get(flight.id, now);
    const purge = row === undefined ? 0 : this.#ctx.epochs.judge(row.born, row.tags);
    // A soft-purged row is kept through its refresh's failure; a hard-purged one never answers.
    if (row !== undefined && !row.negative && purge !== HARD_PURGED) {
      this.#ctx.counters.reads.stale += flight.callers;
      answerAll(flight.waiters, (coalesced) =>
        rowAnswer(row, now, coalesced, purge === SOFT_PURGED),
      );
    } else {
      for (const w of flight.waiters) w.reject(error);
    }
  }

  /**
   * A PUT or DELETE: refused once closed, parked behind a write of the id in
   * progress, or else sent (by `send`) after detaching the id's running flight.
   */
  #write(m: Extract<Message, { kind: 'put' | 'invalidate' }>, send: () => void): void {
    if (this.#closed) m.waiter.reject(this.#closedError(m.id));
    else if (!this.#writes.park(m.id, m)) {
      this.#unconfirmed.delete(m.id);
      this.#supersede(m.id);
      send();
    }
  }

  /** Detaches the running flight of `id`: its waiters still get its answer, but it writes nothing. */
  #supersede(id: string): void {
    const flight = this.#flights.get(id);
    if (flight === undefined) return;
    flight.superseded = true;
    this.#flights.delete(id);
  }

  #closedError(id: string): ClosedError {
    return new ClosedError('the store is shutting down', { table: this.#ctx.name, id });
  }

  #busy(): boolean {
    return (
      this.#flights.size > 0 ||
      this.#filling.size > 0 ||
      this.#writes.size > 0 ||
      this.mailboxDepth > 0
    );
  }

  #checkIdle(): void {
    if (this.#idle !== undefined && !this.#busy()) {
      this.#idle();
      this.#idle = undefined;
    }
  }
}

/** `envelope`, stale from `now` on (a soft purge covers it): served stale while one refresh runs. */
function staleNow(envelope: Envelope, now: number): Envelope {
  return envelope.softExpiresAt <= now ? envelope : { ...envelope, softExpiresAt: now };
}
