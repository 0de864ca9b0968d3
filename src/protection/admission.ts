/**
 * Admission to the source for one table, per process: what protects the source.
 * Three rules, each in full in docs/operations.md ("Admission: protecting the
 * source"):
 *
 * 1. an adaptive concurrency limit (Netflix concurrency-limits' Gradient2):
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

/** The lowest the limit goes: one load at a time still probes a sick source. */
const MIN_LIMIT = 1;
/**
 * Short- and long-term averages of load latency (exponential weights per
 * sample: the short one spans about ten loads, so one tail sample of a source
 * whose latency varies is not a slowdown; the long one about a hundred, so a
 * slowdown shrinks the limit before it becomes the new normal).
 */
const SHORT_WEIGHT = 0.1;
const LONG_WEIGHT = 0.01;
/**
 * How fast the no-load latency follows loads slower than it (exponential weight per sample:
 * about a thousand loads). Ten times slower than the long-term average: a burst that queues
 * (at the source, or in this busy process) raises every load's latency as the limit grows,
 * and must not carry the no-load latency up with it.
 */
const NO_LOAD_WEIGHT = 0.001;
/**
 * A failure of an id that already failed within this window (ms) does not halve
 * the limit again: one id the source keeps refusing (a poison row, a client
 * looping on it) is not the source failing, and must not shed every other id.
 */
const REPEAT_WINDOW_MS = 10_000;
/** Most failed ids remembered for that (the least recently failed forgotten first). */
const MAX_REMEMBERED_FAILURES = 1_000;
/** Loads may take up to this many times their long-term latency before the limit shrinks. */
const TOLERANCE = 2;
/**
 * The limit grows only after a load that started with at least this share of
 * it in use (Gradient2's "app-limited" rule): a limit the traffic never used
 * was never shown to be fast, so it is not raised on its account.
 */
const GROW_MIN_USE = 0.5;
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
  readonly #maxLimit: number;
  readonly #initialLimit: number;
  readonly #maxQueueDelayMs: number;
  readonly #maxQueued: number;
  readonly #maxOverdue: number;
  readonly #now: () => number;
  #limit: number;
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
  #shortMs = 0;
  #longMs = 0;
  /**
   * The no-load latency (Vegas's `rtt_noload`): the lowest short-term average seen, drifting
   * up toward later loads at {@link NO_LOAD_WEIGHT}, so that a lasting slowdown becomes the
   * new no-load latency after a few thousand loads.
   */
  #noLoadMs = 0;
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
    this.#maxLimit = options.maxLimit;
    this.#maxQueueDelayMs = options.maxQueueDelayMs;
    this.#maxQueued = options.maxQueued;
    this.#maxOverdue = options.maxOverdue ?? 0;
    this.#now = options.now ?? (() => performance.now());
    this.#initialLimit = Math.max(
      MIN_LIMIT,
      Math.min(options.maxLimit, options.initialLimit ?? options.maxLimit),
    );
    this.#limit = this.#initialLimit;
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
    return Math.floor(this.#limit);
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
    return Math.max(MIN_OVERDUE_MS, OVERDUE_FACTOR * Math.max(this.#longMs, this.#shortMs));
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
   * it moves) and the recent loads within {@link TOLERANCE} of the long-term
   * latency, so the rate measured is the rate to come — the prediction plus
   * one recent load latency must fit in `maxQueueDelayMs`. While the limit is
   * cut below its initial value it may shrink further under the queued loads:
   * then the prediction must fit in half of it, the other half being the
   * headroom for that error. Either way what is queued is served in time
   * rather than shed late.
   */
  admits(predictedMs: number): boolean {
    const steady = this.#limit >= this.#initialLimit && this.#shortMs <= TOLERANCE * this.#longMs;
    return steady
      ? predictedMs + this.#shortMs <= this.#maxQueueDelayMs
      : predictedMs <= this.#maxQueueDelayMs / 2;
  }

  #historyMsPerLoad(): number {
    return this.#shortMs === 0 ? 0 : this.#shortMs / this.limit;
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
          this.#learn(latencyMs, repeated ? 'repeated' : end, running.activeAtStart);
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
   */
  #sweep(): void {
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
      if (running.id !== undefined) this.#hanging.set(running.id, true);
    }
    this.#grant();
  }

  /**
   * While loads are queued, sweeps when the oldest running load may be
   * overdue, and again while loads stay queued. The
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
        this.#sweep();
        if (this.#queue.length > 0) this.#scheduleSweep();
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

  /**
   * Moves the limit after a load, as Netflix concurrency-limits' Gradient2
   * does (`Gradient2Limit`): the gradient is the long-term latency (about a
   * hundred loads) times {@link TOLERANCE} over the short-term one (about ten
   * loads), within [0.5, 1]; the new limit is the limit times the gradient
   * plus its square root (the queue it may add). So while loads stay as fast
   * as usual the limit grows by its square root per load, and once they take
   * more than twice as long it shrinks in proportion (by at most half per
   * load). It grows only after a load that started with at least
   * {@link GROW_MIN_USE} of the limit in use, as in Gradient2; unlike
   * Gradient2 it shrinks whatever the use, so a source slowed by others' load
   * sees less of ours too.
   *
   * Up to `initialConcurrentLoads` that is all. Above it the limit is headroom
   * a source must keep earning, judged against its no-load latency as TCP
   * Vegas and Gradient (v1) do rather than against the long-term average (which
   * a long burst drags up with it): it grows only while the short-term latency
   * is within {@link TOLERANCE} of the no-load one, and shrinks in proportion,
   * back toward the initial limit, once it is not.
   *
   * A failure halves it; a repeated failure of one id leaves it where it is
   * (Gradient2 has no failures: this is AIMD's multiplicative decrease).
   *
   * @param activeAtStart the pool's loads running when this one started, itself included.
   */
  #learn(latencyMs: number, end: LoadEnd | 'repeated', activeAtStart: number): void {
    if (this.#longMs === 0) {
      this.#shortMs = latencyMs;
      this.#longMs = latencyMs;
      this.#noLoadMs = latencyMs;
    } else {
      this.#shortMs += SHORT_WEIGHT * (latencyMs - this.#shortMs);
      this.#longMs += LONG_WEIGHT * (latencyMs - this.#longMs);
      // A failure's latency (a refused connection answers at once) says nothing of the no-load one.
      if (end === 'ok') {
        this.#noLoadMs = Math.min(
          this.#shortMs,
          this.#noLoadMs + NO_LOAD_WEIGHT * (latencyMs - this.#noLoadMs),
        );
      }
    }
    if (end === 'repeated') return;
    const limit = this.#limit;
    let next: number;
    if (end === 'failed') next = limit / 2;
    else {
      const ratio = (TOLERANCE * this.#longMs) / Math.max(this.#shortMs, 0.001);
      next = limit * Math.max(0.5, Math.min(1, ratio)) + Math.sqrt(limit);
      if (this.#shortMs > TOLERANCE * this.#noLoadMs) {
        // Not near the no-load latency: no growth past the initial limit, and headroom above
        // it withdrawn in proportion (by at most half per load), never below it.
        const noLoadGradient = Math.max(0.5, (TOLERANCE * this.#noLoadMs) / this.#shortMs);
        const ceiling =
          limit > this.#initialLimit
            ? Math.max(this.#initialLimit, limit * noLoadGradient)
            : this.#initialLimit;
        next = Math.min(next, ceiling);
      }
      if (next > limit && activeAtStart < GROW_MIN_USE * limit) return;
    }
    this.#limit = Math.min(this.#maxLimit, Math.max(MIN_LIMIT, next));
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
