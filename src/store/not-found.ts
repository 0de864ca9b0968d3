/**
 * Confirming "not found" before it replaces a value, for a source that can
 * blip (an http origin behind a load balancer, a CDN mid-deploy): one 404 for
 * a row that has a value is a suspicion, not an answer (guardian/frontend#2179).
 */
import { LRUCache } from 'lru-cache';

/** Most ids whose "not found" is being confirmed at once, per table. */
const MAX_SUSPECTS = 10_000;

/**
 * Per table and process: since when each id with a value has been answered
 * "not found". A "not found" replaces the value only once it has been
 * answered for `confirmMs` (the first and a later load at least that far
 * apart); a suspicion older than `confirmMs` + one minute is forgotten, so a
 * blip long ago never confirms a new one. Clock: ms, injected.
 */
export class NotFoundConfirmations {
  readonly #confirmMs: number;
  readonly #now: () => number;
  readonly #since: LRUCache<string, number>;

  /** @param confirmMs 0: every "not found" is final at once (an authoritative source). */
  constructor(confirmMs: number, now: () => number) {
    this.#confirmMs = confirmMs;
    this.#now = now;
    this.#since = new LRUCache<string, number>({
      max: MAX_SUSPECTS,
      ttl: Math.max(1, confirmMs + 60_000),
      perf: { now },
      ttlResolution: 0,
    });
  }

  /**
   * A load of `id`, which has a value, answered "not found": true when that is
   * now confirmed (answered for `confirmMs` already) and the value may go.
   */
  confirmed(id: string): boolean {
    if (this.#confirmMs <= 0) return true;
    const now = this.#now();
    const since = this.#since.get(id);
    if (since === undefined) {
      this.#since.set(id, now);
      return false;
    }
    if (now - since < this.#confirmMs) return false;
    this.#since.delete(id);
    return true;
  }

  /** A load of `id` found it (or it has no value to keep): any suspicion is dropped. */
  found(id: string): void {
    this.#since.delete(id);
  }
}
