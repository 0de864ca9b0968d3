/**
 * The adaptive concurrency limit of one table's admission (rule 1 of
 * admission.ts): how many loads the source is given at once, learnt from how
 * long loads take, after Netflix concurrency-limits' `Gradient2Limit`, with
 * the headroom above the initial limit judged against the no-load latency as
 * TCP Vegas does. In full in docs/operations.md ("Admission: protecting the
 * source").
 */

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
/** Loads may take up to this many times their long-term (or no-load) latency before the limit shrinks. */
const TOLERANCE = 2;
/**
 * The limit grows only after a load that started with at least this share of
 * it in use (Gradient2's "app-limited" rule): a limit the traffic never used
 * was never shown to be fast, so it is not raised on its account.
 */
const GROW_MIN_USE = 0.5;

/** How a load ended, for the limit: `repeated` is a failure of an id that failed just before. */
export type LimitSample = 'ok' | 'failed' | 'repeated';

/** One table's adaptive load limit, per process: read `value`, tell it of each load with `learn`. */
export class LoadLimit {
  readonly #maxLimit: number;
  readonly #initialLimit: number;
  #limit: number;
  #shortMs = 0;
  #longMs = 0;
  /**
   * The no-load latency (Vegas's `rtt_noload`): the lowest short-term average seen, drifting
   * up toward later loads at {@link NO_LOAD_WEIGHT}, so that a lasting slowdown becomes the
   * new no-load latency after a few thousand loads.
   */
  #noLoadMs = 0;

  /**
   * @param maxLimit the ceiling (`maxConcurrentLoads`).
   * @param initialLimit where the limit starts (`initialConcurrentLoads`), brought within 1 … `maxLimit`.
   */
  constructor(maxLimit: number, initialLimit: number) {
    this.#maxLimit = maxLimit;
    this.#initialLimit = Math.max(MIN_LIMIT, Math.min(maxLimit, initialLimit));
    this.#limit = this.#initialLimit;
  }

  /** The limit now, fractional (a caller floors it to count slots). */
  get value(): number {
    return this.#limit;
  }

  /** Average latency of about the last ten loads, ms (0 before the first). */
  get shortMs(): number {
    return this.#shortMs;
  }

  /** Average latency of about the last hundred loads, ms (0 before the first). */
  get longMs(): number {
    return this.#longMs;
  }

  /**
   * Whether the source is steady: the limit at least its initial value (not
   * cut below what the source is trusted with) and the recent loads within
   * {@link TOLERANCE} of the long-term latency.
   */
  get steady(): boolean {
    return this.#limit >= this.#initialLimit && this.#shortMs <= TOLERANCE * this.#longMs;
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
   * Up to the initial limit that is all. Above it the limit is headroom a
   * source must keep earning, judged against its no-load latency as TCP Vegas
   * and Gradient (v1) do rather than against the long-term average (which a
   * long burst drags up with it): it grows only while the short-term latency
   * is within {@link TOLERANCE} of the no-load one, and shrinks in proportion,
   * back toward the initial limit, once it is not.
   *
   * A failure halves it; a repeated failure of one id leaves it where it is
   * (Gradient2 has no failures: this is AIMD's multiplicative decrease).
   *
   * @param latencyMs how long the load took, ms.
   * @param activeAtStart the loads running when this one started, itself included.
   */
  learn(latencyMs: number, end: LimitSample, activeAtStart: number): void {
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
}
