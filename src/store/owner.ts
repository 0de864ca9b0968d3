import { ClosedError, ShedError, ValkeyUnavailableError } from '../errors.js';
import type { Envelope } from './envelope.js';
import type { TableEvent } from './events.js';
import { Flight, type FlightContext, type Outcome, type Waiter } from './flight.js';
import { fly } from './fly.js';
import { RefreshBackoff } from './freshness.js';
import type { LoadGate } from './gate.js';
import type { L1 } from './l1.js';
import { Mailbox } from './mailbox.js';
import type { Message, OwnerCounters, RefreshReason } from './messages.js';
import { resultOf } from './result.js';
import { WriteOrder } from './write-order.js';
import { sendInvalidate, sendPut } from './writes.js';

/**
 * The actor that owns one table's state: its flights (id → waiters), its L1
 * writes after loads, and the ordering of writes per id.
 *
 * Invariants:
 * - Only `#handle` changes `#flights`, `#writes` or L1-after-load; async work
 *   (Valkey, the loader) runs outside and reports back with a message.
 * - A flight is removed by identity, never just by key.
 * - While a `put` or `invalidate` of an id awaits Valkey, later messages for
 *   that id are parked and replayed in order once it is acknowledged, so a
 *   read can never bring back a value the write replaced.
 * - Every waiter is settled exactly once: by its flight's outcome, by its
 *   write's acknowledgement, or by `ECC_CLOSED` on forced shutdown.
 */
export class TableOwner {
  readonly #ctx: FlightContext;
  readonly #l1: L1;
  readonly #counters: OwnerCounters;
  readonly #mailbox: Mailbox<Message>;
  readonly #flights = new Map<string, Flight>();
  readonly #writes = new WriteOrder();
  readonly #backoff = new RefreshBackoff();
  #closed = false;
  #idle: (() => void) | undefined;

  constructor(ctx: Omit<FlightContext, 'early'>, l1: L1, counters: OwnerCounters) {
    this.#ctx = {
      ...ctx,
      early: (flight, envelope) => this.post({ kind: 'early', flight, envelope }),
    };
    this.#l1 = l1;
    this.#counters = counters;
    this.#mailbox = new Mailbox<Message>(
      (m) => this.#handle(m),
      () => this.#checkIdle(),
    );
  }

  /** Messages waiting to be handled. */
  get mailboxDepth(): number {
    return this.#mailbox.depth;
  }

  /** The table's load gate (for its gauges). */
  get gate(): LoadGate {
    return this.#ctx.gate;
  }

  /** Flights in progress. */
  get flights(): number {
    return this.#flights.size;
  }

  /** Queues a message; the mailbox is drained on a microtask, one message at a time. */
  post(message: Message): void {
    this.#mailbox.post(message);
  }

  #handle(m: Message): void {
    switch (m.kind) {
      case 'fill':
        this.#fill(m.id, m.waiter);
        break;
      case 'landed':
        this.#landed(m.flight, m.outcome);
        break;
      case 'put':
      case 'invalidate':
        if (this.#closed) m.waiter.reject(this.#closedError(m.id));
        else if (this.#park(m.id, m)) break;
        else if (m.kind === 'put') this.#put(m);
        else this.#invalidate(m);
        break;
      case 'written':
        this.#written(m);
        break;
      case 'invalidated':
        this.#invalidated(m);
        break;
      case 'refresh':
        this.#refresh(m.id, m.reason);
        break;
      case 'early':
        this.#early(m.flight, m.envelope);
        break;
      case 'event':
        this.#event(m.event);
        break;
      case 'flush':
        this.#l1.clear();
        this.#ctx.metrics.l1Flushes.inc();
        break;
    }
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

  #refresh(id: string, reason: RefreshReason): void {
    if (!this.wantsRefresh(id, Date.now())) return;
    this.#ctx.metrics.refreshes(reason).inc();
    const flight = new Flight(id);
    flight.replaceVersion = this.#l1.peek(id)?.version ?? 0;
    this.#launch(flight);
  }

  #launch(flight: Flight): void {
    flight.startVersion = this.#ctx.clock.mint();
    this.#flights.set(flight.id, flight);
    fly(this.#ctx, flight).then((outcome) => this.post({ kind: 'landed', flight, outcome }));
  }

  /** Answers the flight's waiters with a stale value now; the flight goes on as a refresh. */
  #early(flight: Flight, envelope: Envelope): void {
    if (flight.superseded || flight.waiters.length === 0) return;
    const now = Date.now();
    // In L1, later callers get the stale value without the mailbox while the refresh runs.
    this.#l1.set(flight.id, envelope, now);
    this.#counters.reads.stale += flight.waiters.length;
    this.#ctx.metrics.refreshes('stale').inc();
    flight.waiters.forEach((w, i) => {
      w.resolve(resultOf(envelope, 'l2', i > 0, now));
    });
    flight.waiters.length = 0;
    flight.background = true;
  }

  /** Coherence: drop this instance's L1 row when the event is newer than it (newer-wins). */
  #event(event: TableEvent): void {
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
      this.#ctx.metrics.coherence('applied').inc();
    } else {
      this.#ctx.metrics.coherence('stale').inc();
    }
  }

  #fill(id: string, waiter: Waiter): void {
    if (this.#closed) {
      waiter.reject(this.#closedError(id));
      return;
    }
    if (this.#park(id, { kind: 'fill', id, waiter })) return;
    const now = Date.now();
    const row = this.#l1.get(id, now);
    if (row !== undefined) {
      const stale = now >= row.softExpiresAt;
      this.#counters.reads[row.negative ? 'negative' : stale ? 'stale' : 'l1']++;
      waiter.resolve(resultOf(row, 'l1', false, now));
      if (stale) this.#refresh(id, 'stale');
      return;
    }
    const running = this.#flights.get(id);
    // coalescing 'none' is the drills' baseline: every miss gets its own flight.
    if (running !== undefined && this.#ctx.policy.coalescing !== 'none') {
      if (running.waiters.length >= this.#ctx.policy.maxWaitersPerFlight) {
        this.#ctx.metrics.shed.inc();
        waiter.reject(
          new ShedError(`${running.waiters.length} callers already wait on this item`, {
            table: this.#ctx.table,
            id,
          }),
        );
        return;
      }
      running.waiters.push(waiter);
      this.#counters.coalesced++;
      this.#ctx.metrics.coalesced.inc();
      return;
    }
    this.#launch(new Flight(id, waiter));
  }

  #landed(flight: Flight, outcome: Outcome): void {
    if (this.#flights.get(flight.id) === flight) this.#flights.delete(flight.id);
    if (outcome.loaded) this.#counters.fills++;
    const { metrics } = this.#ctx;
    const now = Date.now();
    if (outcome.kind === 'skipped') {
      // Another instance refreshes: do not ask again before its lease runs out
      // (its fill event will drop our row sooner).
      this.#backoff.pause(flight.id, now + outcome.retryAfterMs);
      // Callers that attached after the flight decided to skip still need an answer.
      if (flight.waiters.length > 0 && !flight.superseded) {
        const again = new Flight(flight.id, flight.waiters[0]);
        again.waiters.push(...flight.waiters.slice(1));
        this.#launch(again);
      }
      return;
    }
    if (outcome.kind === 'error') {
      metrics.loadErrors(outcome.error.code).inc();
      if (flight.background) {
        metrics.refreshFailures.inc();
        this.#backoff.failed(flight.id, now);
      }
      // Stale-if-error: a row still within its hard TTL answers instead of the error.
      const row = flight.superseded ? undefined : this.#l1.get(flight.id, now);
      if (row !== undefined && !row.negative) {
        this.#counters.reads.stale += flight.waiters.length;
        flight.waiters.forEach((w, i) => {
          w.resolve(resultOf(row, 'l1', i > 0, now));
        });
      } else {
        for (const w of flight.waiters) w.reject(outcome.error);
      }
      return;
    }
    this.#backoff.succeeded(flight.id);
    const { envelope, source } = outcome;
    if (source === 'l2') this.#counters.l2_hits++;
    if (!flight.superseded && !outcome.refused) this.#l1.set(flight.id, envelope, now);
    this.#counters.reads[envelope.negative ? 'negative' : source] += flight.waiters.length;
    flight.waiters.forEach((w, i) => {
      w.resolve(resultOf(envelope, source, i > 0, now));
    });
  }

  /** Detaches the running flight of `id`: its waiters still get its answer, but it writes nothing. */
  #supersede(id: string): void {
    const flight = this.#flights.get(id);
    if (flight === undefined) return;
    flight.superseded = true;
    this.#flights.delete(id);
  }

  #put(m: Extract<Message, { kind: 'put' }>): void {
    if (!this.#ctx.health.usable()) {
      m.waiter.reject(this.#valkeyError('put', m.id, undefined));
      return;
    }
    this.#supersede(m.id);
    this.#writes.begin(m.id);
    const { envelope, sent } = sendPut(this.#ctx, m.id, m.value, m.json);
    sent.then(
      (version) =>
        this.post({
          kind: 'written',
          id: m.id,
          envelope: { ...envelope, version },
          waiter: m.waiter,
        }),
      (error: unknown) =>
        this.post({ kind: 'written', id: m.id, envelope, error, waiter: m.waiter }),
    );
  }

  #written(m: Extract<Message, { kind: 'written' }>): void {
    if (m.error === undefined) {
      this.#ctx.health.succeeded();
      this.#ctx.clock.observe(m.envelope.version);
      // This instance's own acknowledged write goes into its L1 whatever version
      // L1 held, unless Valkey already applied a later write of the id (its
      // event arrived before this acknowledgement): then L1 must not hold ours.
      if (this.#writes.overtaken(m.id, m.envelope.version)) this.#l1.delete(m.id);
      else this.#l1.set(m.id, m.envelope, Date.now(), true);
      m.waiter.resolve({ version: m.envelope.version });
    } else {
      this.#ctx.health.failed(m.error);
      // The write may or may not have reached Valkey: drop L1 so the next read asks L2.
      this.#l1.delete(m.id);
      this.#ctx.metrics.valkeyErrors('put').inc();
      m.waiter.reject(this.#valkeyError('put', m.id, m.error));
    }
    this.#unpark(m.id);
  }

  #invalidate(m: Extract<Message, { kind: 'invalidate' }>): void {
    this.#supersede(m.id);
    this.#l1.delete(m.id);
    if (!this.#ctx.health.usable()) {
      m.waiter.reject(this.#valkeyError('delete', m.id, undefined));
      return;
    }
    this.#writes.begin(m.id);
    sendInvalidate(this.#ctx, m.id).then(
      (version) => {
        this.#ctx.clock.observe(version);
        this.post({ kind: 'invalidated', id: m.id, waiter: m.waiter });
      },
      (error: unknown) => this.post({ kind: 'invalidated', id: m.id, error, waiter: m.waiter }),
    );
  }

  #invalidated(m: Extract<Message, { kind: 'invalidated' }>): void {
    this.#l1.delete(m.id);
    if (m.error === undefined) {
      this.#ctx.health.succeeded();
      this.#ctx.metrics.invalidations.inc();
      m.waiter.resolve();
    } else {
      this.#ctx.health.failed(m.error);
      this.#ctx.metrics.valkeyErrors('del').inc();
      m.waiter.reject(this.#valkeyError('delete', m.id, m.error));
    }
    this.#unpark(m.id);
  }

  /** Parks `m` behind a pending write of `id`; true when parked. */
  #park(id: string, m: Message): boolean {
    return this.#writes.park(id, m);
  }

  /** The write of `id` is acknowledged: replay what arrived meanwhile, in order. */
  #unpark(id: string): void {
    for (const m of this.#writes.end(id)) this.#handle(m);
  }

  #valkeyError(op: string, id: string, cause: unknown): ValkeyUnavailableError {
    const { table } = this.#ctx;
    const message =
      cause === undefined
        ? `valkey is unavailable: the ${op} was not sent`
        : `valkey did not confirm the ${op}; it may or may not have been applied`;
    return new ValkeyUnavailableError(message, { table, id, cause });
  }

  #closedError(id: string): ClosedError {
    return new ClosedError('the store is shutting down', { table: this.#ctx.table, id });
  }

  /**
   * Stops taking work and waits for running flights and writes to settle, at
   * most `graceMs`; then aborts the loads still running and fails their
   * waiters with `ECC_CLOSED`.
   */
  async close(graceMs: number): Promise<void> {
    this.#closed = true;
    if (!this.#busy()) return;
    const idle = new Promise<void>((resolve) => {
      this.#idle = resolve;
    });
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), graceMs);
    });
    const result = await Promise.race([idle, deadline]);
    clearTimeout(timer);
    if (result !== 'timeout') return;
    for (const flight of this.#flights.values()) {
      const error = this.#closedError(flight.id);
      flight.abort.abort(error);
      for (const w of flight.waiters) w.reject(error);
      flight.waiters.length = 0;
    }
    this.#flights.clear();
    for (const [id, parked] of this.#writes.drain()) {
      for (const m of parked) if ('waiter' in m) m.waiter.reject(this.#closedError(id));
    }
  }

  #busy(): boolean {
    return this.#flights.size > 0 || this.#writes.size > 0 || this.mailboxDepth > 0;
  }

  #checkIdle(): void {
    if (this.#idle !== undefined && !this.#busy()) {
      this.#idle();
      this.#idle = undefined;
    }
  }
}
