/**
 * Admission to the source for one table, per process: what protects the source.
 * Three rules, each in full in docs/operations.md ("Admission: protecting the
 * source"):
 *
 * 1. an adaptive concurrency limit (Netflix concurrency-limits' Gradient2, load-limit.ts):
 *    at most `limit` loads at once; it starts at `initialConcurrentLoads`, grows
 *    toward `maxConcurrentLoads` while loads stay as fast as usual with at least
 *    half of it in use, and shrinks when loads slow down or fail;
 * 2. shedding by predicted queueing delay, not by count (CoDel, as in "Fail at
 *    Scale", Maurer, ACM Queue 2015): a load that would wait longer than
 *    `maxQueueDelayMs` for a slot is shed at once with `ECC_SHED`;
 * 3. a partition for overdue loads ({@link OVERDUE_FACTOR} × the usual load
 *    time): ids that hang leave the limit for at most `maxOverdueLoads` slots of
 *    their own, so a table never runs more than `maxConcurrentLoads` +
 *    `maxOverdueLoads` loads.
 */
import { LRUCache } from 'lru-cache';
import type { ShedError } from '../errors.js';
import { LoadLimit } from './load-limit.js';

/** Tuning of {@link Admission}. Durations are milliseconds. */
export interface AdmissionOptions {
  /** Ceiling of the limit (`maxConcurrentLoads`). */
  maxLimit: number;
  /** Where the limit starts (`initialConcurrentLoads`), at most `maxLimit`. Default `maxLimit`. */
  initialLimit?: number;
  /** Longest a load may wait for a slot, predicted or actual (`maxQueueDelayMs`). */
  maxQueueDelayMs: number;
  /** Most loads queued at once, a memory bound (`maxQueuedLoads`). */
  maxQueued: number;
  /** Most overdue loads running at once, beyond the limit (`maxOverdueLoads`). Default 0: none leave the pool. */
  maxOverdue?: number;
  /** Clock, ms (tests inject one). Default `performance.now`. */
  now?: () => number;
}

/** How a load ended, for the limit. */
export type LoadEnd = 'ok' | 'failed';

/** A slot: `release` it exactly once, saying how the load ended. */
export interface Permit {
  release(end: LoadEnd): void;
}

interface Queued {
  enqueuedAt: number;
  grant(): void;
  timer: NodeJS.Timeout;
}

/**
 * A failure of an id that already failed within this window (ms) does not halve
 * the limit again: one id the source keeps refusing (a poison row, a client
 * looping on it) is not the source failing, and must not shed every other id.
 */
const REPEAT_WINDOW_MS = 10_000;
/** Most failed ids remembered for that (the least recently failed forgotten first). */
const MAX_REMEMBERED_FAILURES = 1_000;
/**
 * A load running this many times the long-term latency is overdue: hanging on
 * its id. Ten: a healthy load with exponentially distributed latency runs that
 * long once in e¹⁰ ≈ 22,000 loads.
 */
const OVERDUE_FACTOR = 10;
/** Nor before this long, ms: a source of sub-millisecond loads has jitter of this order. */
const MIN_OVERDUE_MS = 100;
/**
 * A pool in which no load finished for this long (ms, or the overdue time if
 * longer) is stalled: its loads may be moved out although none overtook them.
 * Not shorter: a source that is merely slow, or a busy process that reads its
 * answers late, must keep its loads in the pool (and so its bound).
 */
const MIN_STALL_MS = 1_000;
/**
 * The share of `maxQueueDelayMs` a steady source's predicted wait (plus one load) may fill; the
 * rest is headroom for loads that slow down while the queue waits (a process busy with the burst
 * it queued sees its loads run longer than their recent average).
 */
const STEADY_SHARE = 0.8;
/** An id whose load went overdue is admitted straight to the overdue partition for this long, ms. */
const HANGING_MEMORY_MS = 30_000;

/**
 * A load holding a slot: when it started, for which id, the pool's loads done
 * by then, the pool's loads running then (itself included), and whether it is overdue.
 */
interface Running {
  startedAt: number;
  id: string | undefined;
  doneAtStart: number;
  activeAtStart: number;
  overdue: boolean;
}

export class Admission {
  readonly #maxQueueDelayMs: number;
  readonly #maxQueued: number;
  readonly #maxOverdue: number;
  readonly #now: () => number;
  /** The adaptive limit and the latency averages it learns from. */
  readonly #limit: LoadLimit;
  /** Loads in the pool (not overdue), oldest first. */
  readonly #running = new Set<Running>();
  #active = 0;
  /** Loads in the overdue partition. */
  #overdue = 0;
  /** Ids whose load went overdue within {@link HANGING_MEMORY_MS}. */
  readonly #hanging: LRUCache<string, true>;
  /** Loads of the pool finished since the start, and when the last one did. */
  #poolDone = 0;
  #lastPoolDoneAt: number;
  /** Moves overdue loads out while loads are queued (none while nothing waits). */
  #sweepTimer: NodeJS.Timeout | undefined;
  readonly #queue: Queued[] = [];
  /** True during a busy period: from a load finding every slot taken until the queue drains. */
  #busy = false;
  /** Loads finished in the current busy period, and when the first of them did. */
  #busyDone = 0;
  #busyFirstDoneAt: number | undefined;
  /** What the history predicted per queued load when the busy period began. */
  #busyHistoryMsPerLoad = 0;
  /** The ids that failed within {@link REPEAT_WINDOW_MS} of now (an id's window restarts at each failure). */
  readonly #recentlyFailed: LRUCache<string, true>;

  constructor(options: AdmissionOptions) {
    this.#maxQueueDelayMs = options.maxQueueDelayMs;
    this.#maxQueued = options.maxQueued;
    this.#maxOverdue = options.maxOverdue ?? 0;
    this.#now = options.now ?? (() => performance.now());
    this.#limit = new LoadLimit(options.maxLimit, options.initialLimit ?? options.maxLimit);
    this.#lastPoolDoneAt = this.#now();
    const now = this.#now;
    this.#recentlyFailed = new LRUCache<string, true>({
      max: MAX_REMEMBERED_FAILURES,
      ttl: REPEAT_WINDOW_MS,
      // On this admission's clock, read every time (no cached reading, no timers). lru-cache
      // keeps an entry through the millisecond its ttl ends: "within" includes the end.
      perf: { now },
      ttlResolution: 0,
    });
    this.#hanging = new LRUCache<string, true>({
      max: MAX_REMEMBERED_FAILURES,
      ttl: HANGING_MEMORY_MS,
      perf: { now },
      ttlResolution: 0,
    });
  }

  /** Loader calls allowed at once now (between 1 and `maxConcurrentLoads`; `initialConcurrentLoads` at first). */
  get limit(): number {
    return Math.floor(this.#limit.value);
  }

  /** Loader calls running now, overdue ones included. */
  get active(): number {
    return this.#active + this.#overdue;
  }

  /** Overdue loader calls running now, outside the limit (see rule 3 above). */
  get overdue(): number {
    return this.#overdue;
  }

  /**
   * How long a load runs before it may be overdue, ms: ten times the usual
   * latency, long- or short-term whichever is higher (a source that slows
   * down, or a busy process, raises it at once), at least {@link MIN_OVERDUE_MS}.
   */
  get overdueAfterMs(): number {
    return Math.max(
      MIN_OVERDUE_MS,
      OVERDUE_FACTOR * Math.max(this.#limit.longMs, this.#limit.shortMs),
    );
  }

  /** Loads waiting for a slot now. */
  get queued(): number {
    return this.#queue.length;
  }

  /** How long the oldest queued load has waited, ms (0 when none waits): the queueing delay now. */
  get queueDelayMs(): number {
    const oldest = this.#queue[0];
    return oldest === undefined ? 0 : this.#now() - oldest.enqueuedAt;
  }

  /**
   * How long each load ahead of a queued one delays it, ms: the inverse of the
   * rate at which slots free up. While every slot is taken (a busy period),
   * that rate is measured once two generations of loads (twice the limit) have
   * finished in it: the time since the first of them finished, over their
   * number (a stall shows as a growing gap). Before that it is what the
   * history said when the busy period began: Little's law on the limit and the
   * recent load latency (limit ÷ latency); 0 (admit) with no history at all.
   * The loads that end in a burst's own first moments are slowed by the burst
   * (the process is busy taking it in), so they are not what predicts its drain.
   */
  msPerQueuedLoad(): number {
    if (!this.#busy) return this.#historyMsPerLoad();
    if (this.#busyDone >= 2 * this.limit && this.#busyFirstDoneAt !== undefined) {
      const drainMs = this.#now() - this.#busyFirstDoneAt;
      if (drainMs > 0) return drainMs / (this.#busyDone - 1);
    }
    return this.#busyHistoryMsPerLoad;
  }

  /**
   * Whether a load with `predictedMs` of queueing ahead of it is admitted to
   * the queue. The prediction is a rate; the loads running now are at some
   * phase of theirs, so the wait may exceed it by up to one load's latency
   * (a burst starts its loads together, and they free their slots together).
   * While the source is steady — the limit at least its initial value (what
   * moves above it is headroom a burst earned, measured in the drain rate as
   * it moves) and the recent loads within twice the long-term latency
   * ({@link LoadLimit.steady}), so the rate measured is the rate to come — the prediction plus
   * one recent load latency must fit in {@link STEADY_SHARE} of `maxQueueDelayMs`. While the limit is
   * cut below its initial value it may shrink further under the queued loads:
   * then the prediction must fit in half of it, the other half being the
   * headroom for that error. Either way what is queued is served in time
   * rather than shed late.
   */
  admits(predictedMs: number): boolean {
    return this.#limit.steady
      ? predictedMs + this.#limit.shortMs <= STEADY_SHARE * this.#maxQueueDelayMs
      : predictedMs <= this.#maxQueueDelayMs / 2;
  }

  #historyMsPerLoad(): number {
    const { shortMs } = this.#limit;
    return shortMs === 0 ? 0 : shortMs / this.limit;
  }

  /**
   * Takes a slot, waiting in the queue when its predicted wait allows.
   *
   * @param shed builds the error for a shed load, given a suggested retry delay in ms.
   * @param id the id loaded, if any: a failure of an id that failed within
   *   {@link REPEAT_WINDOW_MS} does not halve the limit again.
   * @returns a permit to release when the load ends.
   * @throws {ShedError} (rejects) when the predicted wait is not
   *   {@link admits | admitted}, or the actual wait would exceed
   *   `maxQueueDelayMs`, or `maxQueuedLoads` loads wait already.
   */
  acquire(shed: (retryAfterMs: number) => ShedError, id?: string): Promise<Permit> {
    if (id !== undefined && this.#hanging.has(id)) {
      // It hung lately: it runs in the overdue partition or not at all.
      if (this.#overdue < this.#maxOverdue) return Promise.resolve(this.#take(id, true));
      return Promise.reject(shed(this.#maxQueueDelayMs));
    }
    if (this.#active < this.limit) return Promise.resolve(this.#take(id));
    if (!this.#busy) {
      this.#busy = true;
      this.#busyDone = 0;
      this.#busyFirstDoneAt = undefined;
      this.#busyHistoryMsPerLoad = this.#historyMsPerLoad();
    }
    const predictedMs = (this.#queue.length + 1) * this.msPerQueuedLoad();
    if (!this.admits(predictedMs) || this.#queue.length >= this.#maxQueued) {
      return Promise.reject(shed(Math.max(predictedMs, this.#maxQueueDelayMs)));
    }
    return new Promise((resolve, reject) => {
      const entry: Queued = {
        enqueuedAt: this.#now(),
        grant: () => {
          clearTimeout(entry.timer);
          resolve(this.#take(id));
        },
        timer: setTimeout(() => {
          const i = this.#queue.indexOf(entry);
          if (i >= 0) this.#queue.splice(i, 1);
          reject(shed(this.#maxQueueDelayMs));
        }, this.#maxQueueDelayMs),
      };
      this.#queue.push(entry);
      this.#scheduleSweep();
    });
  }

  #take(id: string | undefined, overdue = false): Permit {
    const started = this.#now();
    if (overdue) this.#overdue++;
    else this.#active++;
    const running: Running = {
      startedAt: started,
      id,
      doneAtStart: this.#poolDone,
      activeAtStart: this.#active,
      overdue,
    };
    if (!overdue) this.#running.add(running);
    let released = false;
    return {
      release: (end) => {
        if (released) return;
        released = true;
        const latencyMs = this.#now() - started;
        if (id !== undefined && latencyMs < this.overdueAfterMs) this.#hanging.delete(id);
        if (running.overdue) {
          // Hanging on its id: it says nothing about the source's latency or health.
          this.#overdue--;
          if (this.#queue.length > 0) this.#scheduleSweep();
          return;
        }
        // Overdue but never moved out (the partition was full, or it ended first), and
        // overtaken: hanging on its id too. Its retries go to the partition, and its end,
        // like a moved one's, teaches the limit nothing (its latency would raise the very
        // overdue time that tells hanging loads apart, and its failure would halve the limit).
        const overtaken =
          latencyMs >= this.overdueAfterMs &&
          this.#poolDone - running.doneAtStart >= 2 * this.limit;
        if (overtaken && id !== undefined) this.#hanging.set(id, true);
        this.#running.delete(running);
        this.#active--;
        this.#poolDone++;
        this.#lastPoolDoneAt = this.#now();
        if (this.#busy) {
          this.#busyDone++;
          this.#busyFirstDoneAt ??= this.#now();
        }
        if (!overtaken) {
          const repeated = end === 'failed' && id !== undefined && this.#failedAgain(id);
          this.#limit.learn(latencyMs, repeated ? 'repeated' : end, running.activeAtStart);
        }
        this.#grant();
      },
    };
  }

  /**
   * Whether `running` is overdue at `now`: it has run {@link overdueAfterMs},
   * and meanwhile either loads that started after it finished (2 × the limit
   * did since it started: it was overtaken) or none of the pool finished for
   * {@link MIN_STALL_MS} (the pool is stalled). A pool that is merely slow —
   * a slow source, or a busy process that answers late — finishes its loads
   * about in order, and so keeps them.
   */
  #isOverdue(running: Running, now: number, overdueAfterMs: number): boolean {
    if (now - running.startedAt < overdueAfterMs) return false;
    const overtaken = this.#poolDone - running.doneAtStart >= 2 * this.limit;
    return overtaken || now - this.#lastPoolDoneAt >= Math.max(overdueAfterMs, MIN_STALL_MS);
  }

  /**
   * Moves the loads of the pool that are overdue into the overdue partition
   * (while it has room), oldest first, and hands the slots they free to the queue.
   *
   * @returns how many loads it moved.
   */
  #sweep(): number {
    let moved = 0;
    const now = this.#now();
    const overdueAfterMs = this.overdueAfterMs;
    for (const running of this.#running) {
      // Oldest first: once one is not overdue, no younger one is.
      if (this.#overdue >= this.#maxOverdue || !this.#isOverdue(running, now, overdueAfterMs))
        break;
      this.#running.delete(running);
      running.overdue = true;
      this.#active--;
      this.#overdue++;
      moved++;
      if (running.id !== undefined) this.#hanging.set(running.id, true);
    }
    this.#grant();
    return moved;
  }

  /**
   * While loads are queued, sweeps when the oldest running load may be
   * overdue, and again while loads stay queued or the last sweep moved loads
   * out (the queued loads it let in may hang on their ids too: many hanging ids
   * at once, a stalled pool). The
   * sweep runs after the event loop's I/O (`setImmediate` from the timer), so
   * loads that finished while this process was busy are counted first, not
   * mistaken for a stalled pool.
   */
  #scheduleSweep(): void {
    if (this.#sweepTimer !== undefined || this.#overdue >= this.#maxOverdue) return;
    const oldest = this.#running.values().next().value as Running | undefined;
    if (oldest === undefined) return;
    // When the oldest may first be overdue: it has run long enough, and the pool is stalled by
    // then — or, looked at every quarter of that, overtaken.
    const overdueAfterMs = this.overdueAfterMs;
    const now = this.#now();
    const at = Math.max(
      oldest.startedAt + overdueAfterMs,
      Math.min(
        this.#lastPoolDoneAt + Math.max(overdueAfterMs, MIN_STALL_MS),
        now + overdueAfterMs / 4,
      ),
    );
    const dueInMs = Math.max(1, at - now);
    this.#sweepTimer = setTimeout(() => {
      setImmediate(() => {
        this.#sweepTimer = undefined;
        const moved = this.#sweep();
        if (this.#queue.length > 0 || moved > 0) this.#scheduleSweep();
      });
    }, dueInMs);
    this.#sweepTimer.unref();
  }

  /** Notes that `id` failed: true when it had failed within {@link REPEAT_WINDOW_MS} already. */
  #failedAgain(id: string): boolean {
    const before = this.#recentlyFailed.has(id);
    this.#recentlyFailed.set(id, true);
    return before;
  }

  /** Hands free slots to the longest-waiting loads. */
  #grant(): void {
    while (this.#active < this.limit) {
      const next = this.#queue.shift();
      if (next === undefined) {
        this.#busy = false;
        return;
      }
      next.grant();
    }
  }
}
