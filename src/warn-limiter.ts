/**
 * One warn line per kind of failure per window: the rest at debug, their count
 * in one line when the window closes. Shared by the HTTP error handler and the
 * table's writes.
 */
import { LRUCache } from 'lru-cache';

/** How long the warn lines of one kind of failure are limited to one, ms. */
export const WARN_WINDOW_MS = 10_000;

/** What a window's repeats are reported with: the fields that make its key. */
export type WarnKey = Record<string, string | number | undefined>;

/**
 * Limits repeated warn lines: of the answers of one kind (a code, a table,
 * the kind of cause), the first in each {@link WARN_WINDOW_MS} window is a
 * warning and the others are logged at debug; when a window with repeats
 * closes, `report` is called once with their count (a timer: the count is
 * reported even if no answer of that kind follows). Under overload (every
 * excess request shed, every write refused) the log would otherwise grow
 * with the very load the process cannot take, in the process least able to
 * afford it (after printk_ratelimit and journald's rate limit). The counters
 * count every answer.
 */
export class WarnLimiter {
  /** The open windows by kind; a window ends `windowMs` after it opened (the most kinds kept: 1,000). */
  readonly #windows: LRUCache<string, { openedAt: number; repeats: number }>;
  readonly #report: (fields: WarnKey, repeats: number) => void;
  readonly #windowMs: number;
  readonly #now: () => number;

  /**
   * @param report called when a window with repeats closes, with its key's fields and their count.
   * @param windowMs window length, ms. @param now clock, ms (tests inject one).
   */
  constructor(
    report: (fields: WarnKey, repeats: number) => void,
    windowMs = WARN_WINDOW_MS,
    now: () => number = () => performance.now(),
  ) {
    this.#report = report;
    this.#windowMs = windowMs;
    this.#now = now;
    this.#windows = new LRUCache({ max: 1_000, ttl: windowMs, perf: { now }, ttlResolution: 0 });
  }

  /** Takes one answer of the kind `fields` names: true when it is to be warned (the first of its window). */
  take(fields: WarnKey): boolean {
    const key = JSON.stringify(fields);
    const now = this.#now();
    const window = this.#windows.get(key);
    // lru-cache keeps an entry through the very millisecond its ttl ends; the window does not.
    if (window === undefined || now - window.openedAt >= this.#windowMs) {
      this.#windows.set(key, { openedAt: now, repeats: 0 });
      return true;
    }
    if (window.repeats++ === 0) {
      const close = () => this.#report(fields, window.repeats);
      setTimeout(close, this.#windowMs - (now - window.openedAt)).unref();
    }
    return false;
  }
}
