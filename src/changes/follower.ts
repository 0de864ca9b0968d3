/**
 * A change stream's follower: one per stream on every instance, of which
 * the one holding the stream's lease reads it. Each committed transaction's
 * ids go through the table's own DELETE path (`Table.invalidate`: a
 * tombstone, or in `stale` mode the value marked stale, that cancels the id's
 * lease, so a load that read the row before the commit never stores it after
 * as fresh), a TRUNCATE through its table purge (`Table.purge`); then the
 * stream's position is raised in Valkey, and only then is the transaction
 * acknowledged to the database. A step Valkey refuses is tried again within
 * the run for a while (a Valkey restart costs no stream restart); a crash
 * anywhere before the acknowledgement replays the transaction (at least once;
 * replaying an invalidation or a purge is harmless).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { EchoStoreError } from '../errors.js';
import type { StreamLease } from './lease.js';
import type { ChangeMetrics } from './metrics.js';
import type { StreamPosition } from './position.js';
import type { ChangeBatch, ChangeStream, StreamSink } from './stream.js';

/** The longest pause between two runs of a stream that keeps failing, ms. */
const MAX_RETRY_MS = 30_000;
/**
 * How long a transaction whose invalidations Valkey refuses is applied again inside the run, ms
 * (pauses of 50 ms doubling to 1 s) before the run ends: a Valkey restart or failover costs no
 * stream restart, and so no gap in reading.
 */
const APPLY_RETRY_MS = 10_000;

/** What a stream's changes do to its cache table; each resolves once Valkey applied and published it. */
export interface ChangeTarget {
  /** A row changed: the table's DELETE of its id (`Table.invalidate`, soft in `stale` mode). */
  invalidate(id: string): Promise<void>;
  /** A watched table was truncated: the table's purge of every row (`Table.purge`, soft in `stale` mode). */
  truncate(): Promise<void>;
}

/** Options of {@link ChangeFollower}. */
export interface FollowerOptions {
  stream: ChangeStream;
  lease: StreamLease;
  position: StreamPosition;
  target: ChangeTarget;
  /** How long the lease outlives its holder, ms; it is renewed every quarter of that. */
  leaseMs: number;
  metrics: ChangeMetrics;
  log: Logger;
}

/** Follows one stream: competes for its lease, reads it while holding it. */
export class ChangeFollower {
  readonly #o: FollowerOptions;
  readonly #timer: NodeJS.Timeout;
  /** The run in progress and how to stop it; undefined while this instance does not read. */
  #run: { abort: AbortController; done: Promise<void>; streaming: boolean } | undefined;
  /** When this instance last confirmed its lease (performance.now ms). */
  #heldAt = Number.NEGATIVE_INFINITY;
  #ticking = false;
  /** Runs that failed in a row before they streamed, and when the next may start (`performance.now()`). */
  #failures = 0;
  #retryAt = 0;
  #closed = false;

  constructor(options: FollowerOptions) {
    this.#o = options;
    this.#timer = setInterval(() => void this.#tick(), Math.max(50, options.leaseMs / 4));
    this.#timer.unref();
    void this.#tick();
  }

  /** The stream's name (its replication slot, or its binlog stream): it names its lease and position. */
  get streamName(): string {
    return this.#o.stream.name;
  }

  /** True while this instance reads the stream (it holds the lease and the database streams to it). */
  get reading(): boolean {
    return this.#run?.streaming === true;
  }

  /** Stops reading, gives the lease up, closes the stream. */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#stop();
    await this.#o.lease.release().catch(() => {});
    await this.#o.stream.close();
  }

  async #tick(): Promise<void> {
    if (this.#ticking || this.#closed) return;
    this.#ticking = true;
    try {
      let held: boolean;
      try {
        held = await this.#o.lease.hold();
        if (held) this.#heldAt = performance.now();
      } catch {
        // Valkey does not answer: the lease may still be ours until it would have expired.
        held = performance.now() - this.#heldAt < this.#o.leaseMs;
      }
      if (this.#closed) return;
      if (held && this.#run === undefined && performance.now() >= this.#retryAt) this.#start();
      else if (!held && this.#run !== undefined) {
        this.#o.log.warn('lost the change stream lease: stopping');
        await this.#stop();
      }
      this.#o.metrics.holder.set({ stream: this.#o.stream.name }, this.reading ? 1 : 0);
    } finally {
      this.#ticking = false;
    }
  }

  #start(): void {
    const { stream, log, metrics } = this.#o;
    const abort = new AbortController();
    const run: { abort: AbortController; done: Promise<void>; streaming: boolean } = {
      abort,
      done: Promise.resolve(),
      streaming: false,
    };
    const started = () => {
      run.streaming = true;
      this.#failures = 0;
      log.info('reading the change stream');
    };
    run.done = stream.run(this.#sink(started, abort.signal), abort.signal).then(
      () => {},
      (err: unknown) => {
        metrics.restarts.inc({ stream: stream.name });
        // Back off (0.5 s, doubling to 30 s) while runs keep failing before they stream
        // (a binlog that is off, a slot that cannot be read): no busy loop, no log flood.
        const backoffMs = Math.min(MAX_RETRY_MS, 500 * 2 ** this.#failures++);
        this.#retryAt = performance.now() + backoffMs;
        log.warn(
          { err, retryInMs: backoffMs },
          'change stream stopped: reading again from the last acknowledged position',
        );
      },
    );
    this.#run = run;
    // A failed run ends; the next tick starts another if the lease is still ours.
    void run.done.then(() => {
      if (this.#run === run) this.#run = undefined;
    });
  }

  async #stop(): Promise<void> {
    const run = this.#run;
    if (run === undefined) return;
    this.#run = undefined;
    run.abort.abort();
    await run.done;
  }

  #sink(started: () => void, signal: AbortSignal): StreamSink {
    const { target, position, metrics, log, stream } = this.#o;
    const labels = { stream: stream.name };
    const applyOnce = async (batch: ChangeBatch) => {
      const invalidated = [...batch.ids].map((id) => invalidateOne(target, id));
      if (batch.truncated) invalidated.push(target.truncate());
      await Promise.all(invalidated);
      await position.raise(batch.position);
    };
    return {
      started,
      apply: async (batch: ChangeBatch) => {
        await retried(
          signal,
          APPLY_RETRY_MS,
          () => applyOnce(batch),
          (err) => log.warn({ err }, 'Valkey refused a change: applying it again within the run'),
        );
        if (batch.truncated) {
          metrics.truncates.inc(labels);
          log.info('a watched table was truncated: purged every row of the cache table');
        }
        metrics.transactions.inc(labels);
        metrics.invalidations.inc(labels, batch.ids.size);
        metrics.lagSeconds.set(labels, Math.max(0, Date.now() - batch.commitTimeMs) / 1000);
      },
      passed: async (at: bigint) => {
        await retried(
          signal,
          APPLY_RETRY_MS,
          () => position.raise(at),
          () => {},
        );
        metrics.lagSeconds.set(labels, 0);
      },
    };
  }
}

/**
 * Runs `step` until it resolves, pausing 50 ms doubling to 1 s between tries, while `signal` is
 * not aborted and for at most `withinMs`; `onFirstFailure` hears of the first failure only.
 *
 * @throws (rejects) the last failure once the signal aborts or the time is up.
 */
async function retried(
  signal: AbortSignal,
  withinMs: number,
  step: () => Promise<void>,
  onFirstFailure: (err: unknown) => void,
): Promise<void> {
  const deadline = performance.now() + withinMs;
  for (let pauseMs = 50; ; pauseMs = Math.min(1_000, pauseMs * 2)) {
    try {
      return await step();
    } catch (err) {
      if (pauseMs === 50) onFirstFailure(err);
      if (signal.aborted || performance.now() + pauseMs > deadline) throw err;
      await sleep(pauseMs, undefined, { signal }).catch(() => {});
      if (signal.aborted) throw err;
    }
  }
}

/** An id the table refuses (`ECC_BAD_ID`: not its pattern) is never cached: nothing to invalidate. */
async function invalidateOne(target: ChangeTarget, id: string): Promise<void> {
  try {
    await target.invalidate(id);
  } catch (err) {
    if (err instanceof EchoStoreError && err.code === 'ECC_BAD_ID') return;
    throw err;
  }
}
