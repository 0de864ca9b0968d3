import { LRUCache } from 'lru-cache';
import type { Envelope } from './envelope.js';
import type { L1Policy } from './policy.js';

/** One L1 row: the decoded envelope (value, its JSON text, version, soft expiry). */
export type L1Row = Envelope;

/**
 * The in-process L1: an lru-cache bounded by entries and bytes, each row with
 * a jittered TTL that never outlives the row's hard TTL (between soft and hard
 * expiry a row is served stale while one caller refreshes it).
 *
 * L1 does not compare versions: the owner decides what may be stored (a
 * superseded flight or a refused fill never reaches `set`; coherence events
 * drop rows newer-wins), see docs/ordering.md. A row too large for the byte
 * budget is simply not kept: the fill still answers its callers
 * (pass-through, never failure).
 */
export class L1 {
  readonly #cache: LRUCache<string, L1Row>;
  readonly #policy: L1Policy;
  readonly #jitter: number;

  constructor(policy: L1Policy, jitter: number) {
    this.#policy = policy;
    this.#jitter = jitter;
    this.#cache = new LRUCache<string, L1Row>({
      max: policy.maxEntries,
      maxSize: policy.maxBytes,
      maxEntrySize: Math.max(1, Math.floor(policy.maxBytes / 8)),
      // UTF-8 bytes, as L1Policy.maxBytes documents (`.length` counts UTF-16 units and undercounts non-ASCII).
      sizeCalculation: (row, key) => Buffer.byteLength(row.json) + Buffer.byteLength(key) + 64,
      ttlAutopurge: false,
    });
  }

  /**
   * The row, if present, not past its L1 TTL and not past its hard TTL at
   * `now` (epoch ms). lru-cache reads a cached clock (`ttlResolution`), so the
   * hard TTL is checked here against the caller's clock too. Never touches Valkey.
   */
  get(id: string, now: number): L1Row | undefined {
    const row = this.#cache.get(id);
    return row !== undefined && now < row.hardExpiresAt ? row : undefined;
  }

  /**
   * Stores `row` for at most `l1.ttlMs` (jittered), never past its hard TTL.
   *
   * @param now epoch milliseconds, for the hard-TTL bound.
   * @returns true when the row was stored (false: already past its hard TTL, or too large).
   */
  set(id: string, row: L1Row, now: number): boolean {
    const remainingMs = row.hardExpiresAt - now;
    if (remainingMs <= 0) {
      this.#cache.delete(id);
      return false;
    }
    const ttl = Math.min(this.#policy.ttlMs * (1 + Math.random() * this.#jitter), remainingMs);
    this.#cache.set(id, row, { ttl: Math.max(1, Math.floor(ttl)) });
    return this.#cache.has(id);
  }

  /** The row, even past its L1 TTL, without touching recency (coherence checks). */
  peek(id: string): L1Row | undefined {
    return this.#cache.peek(id, { allowStale: true });
  }

  /** Drops `id`'s row. */
  delete(id: string): void {
    this.#cache.delete(id);
  }

  /** Remaining L1 TTL of `id` in milliseconds (0 if absent); for tests and diagnostics. */
  remainingTtlMs(id: string): number {
    return Math.max(0, this.#cache.getRemainingTTL(id));
  }

  /** Drops every row. */
  clear(): void {
    this.#cache.clear();
  }

  get size(): number {
    return this.#cache.size;
  }

  get bytes(): number {
    return this.#cache.calculatedSize;
  }
}
