/**
 * Freshness decisions that are not the owner's state: XFetch early refresh
 * and the retry back-off of failed refreshes (stale-if-error).
 */
import { LRUCache } from 'lru-cache';
import type { Envelope } from '../l2/format.js';

/**
 * XFetch (Vattani, Chierichetti, Lowenstein, "Optimal Probabilistic Cache
 * Stampede Prevention", VLDB 2015): refresh early when
 * `now − deltaMs · beta · ln(random()) ≥ softExpiresAt`. The closer the soft
 * expiry and the slower the load (`deltaMs`), the likelier; `beta` 0 turns it off.
 */
export function xfetchDue(
  row: Pick<Envelope, 'softExpiresAt' | 'deltaMs' | 'negative'>,
  now: number,
  beta: number,
  random: () => number = Math.random,
): boolean {
  if (beta <= 0 || row.negative || row.deltaMs <= 0) return false;
  return now - row.deltaMs * beta * Math.log(random()) >= row.softExpiresAt;
}

/**
 * −ln of the smallest positive `Math.random()` (2^-53): no draw but an exact 0
 * (odds 2^-53) pulls a refresh earlier than this many `deltaMs · beta`.
 */
const MAX_PULL = 53 * Math.LN2;

/**
 * Whether {@link xfetchDue} could say yes at `now` with `Math.random`: a
 * check without a draw, so that a hit far from its soft expiry (the usual one)
 * draws no random and takes no logarithm.
 */
export function xfetchPossible(
  row: { softExpiresAt: number; deltaMs: number },
  now: number,
  beta: number,
): boolean {
  return now + row.deltaMs * beta * MAX_PULL >= row.softExpiresAt;
}

/** First and longest pause before refreshing an id whose refresh failed, ms. */
const FIRST_BACKOFF_MS = 1_000;
const MAX_BACKOFF_MS = 30_000;

/**
 * Remembers ids whose background refresh failed, so a failing source is asked
 * again after 1 s, 2 s, 4 s … 30 s rather than on every stale hit
 * (stale-if-error keeps serving the stale value meanwhile). Bounded: at most
 * `maxIds` ids are remembered (least recently failed are forgotten first).
 */
export class RefreshBackoff {
  readonly #failures: LRUCache<string, { until: number; count: number }>;

  constructor(maxIds = 10_000) {
    this.#failures = new LRUCache({ max: maxIds });
  }

  /** False while `id` is backing off. */
  mayRetry(id: string, now: number): boolean {
    const f = this.#failures.get(id);
    return f === undefined || now >= f.until;
  }

  /** A refresh of `id` failed: back off for twice as long as last time. */
  failed(id: string, now: number): void {
    const count = (this.#failures.get(id)?.count ?? 0) + 1;
    const pauseMs = Math.min(FIRST_BACKOFF_MS * 2 ** (count - 1), MAX_BACKOFF_MS);
    this.#failures.set(id, { until: now + pauseMs, count });
  }

  /** Another instance is refreshing `id`: do not try before `until` (no failure counted). */
  pause(id: string, until: number): void {
    const f = this.#failures.get(id);
    this.#failures.set(id, { until: Math.max(until, f?.until ?? 0), count: f?.count ?? 0 });
  }

  /** A refresh of `id` succeeded. */
  succeeded(id: string): void {
    this.#failures.delete(id);
  }
}
