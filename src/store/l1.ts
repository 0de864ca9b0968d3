/**
 * The in-process L1: rows bounded by count and by the heap they really take,
 * evicted by SIEVE (Zhang et al., "SIEVE is Simpler than LRU", NSDI 2024): a
 * hit only sets a bit, and a hand walking from the oldest row evicts the first
 * one not hit since it last passed.
 *
 * A row keeps the value's JSON text, never the decoded value: the text is what
 * the HTTP path sends, and what a row costs can then be counted (a decoded
 * value's heap size cannot). Library callers decode on demand (`answers.ts`).
 */
import type { Envelope } from './envelope.js';
import type { L1Policy } from './policy.js';

/**
 * Heap bytes of one row besides its two strings, measured on Node 20 x64
 * (`npm run bench:memory` prints the calibration): the row object and its
 * boxed version, the Map entry with the table's growth slack, and the header
 * of an L2 value the JSON text may still point into. High enough for a
 * process up 24 days, when its millisecond times no longer fit a small
 * integer and each takes a box too.
 */
export const ROW_OVERHEAD_BYTES = 272;

/**
 * Heap bytes of a string of `s.length` code units: a 16-byte header, one byte
 * per unit when every unit is ASCII, else two (counted high: Latin-1 text also
 * fits one byte per unit), rounded up to 8.
 */
export function stringBytes(s: string, utf8Bytes = Buffer.byteLength(s)): number {
  const units = utf8Bytes === s.length ? s.length : 2 * s.length;
  return (16 + units + 7) & ~7;
}

/** One L1 row: the envelope without its decoded value, and when it leaves L1. */
export class L1Row {
  readonly json: string;
  readonly version: number;
  readonly softExpiresAt: number;
  readonly hardExpiresAt: number;
  readonly deltaMs: number;
  readonly negative: boolean;
  /** Leaves L1 at this instant (this process's clock): the jittered `l1.ttlMs`, never past `hardExpiresAt`. */
  readonly expiresAt: number;
  /** What the row counts against `maxBytes`. */
  readonly bytes: number;
  /** Hit since the hand last passed it (SIEVE's bit). */
  visited = false;

  constructor(envelope: Envelope, expiresAt: number, bytes: number) {
    this.json = envelope.json;
    this.version = envelope.version;
    // Whole milliseconds, rounded down (a row goes stale or leaves at most 1 ms
    // early): small integers live in the row itself, where fractions would each
    // take a 16-byte box of their own.
    this.softExpiresAt = Math.floor(envelope.softExpiresAt);
    this.hardExpiresAt = Math.floor(envelope.hardExpiresAt);
    this.deltaMs = envelope.deltaMs;
    this.negative = envelope.negative;
    this.expiresAt = Math.floor(expiresAt);
    this.bytes = bytes;
  }
}

/**
 * The in-process L1. Each row lives for the jittered `l1.ttlMs`, never past
 * its hard TTL (between soft and hard expiry it is served stale while one
 * caller refreshes it).
 *
 * L1 does not compare versions: the owner decides what may be stored (a
 * superseded flight or a refused fill never reaches `set`; coherence events
 * drop rows newer-wins), see docs/ordering.md. A row larger than an eighth of
 * `maxBytes` is not kept: the fill still answers its callers (pass-through,
 * never failure).
 */
export class L1 {
  readonly #rows = new Map<string, L1Row>();
  readonly #policy: L1Policy;
  readonly #jitter: number;
  readonly #maxRowBytes: number;
  /** SIEVE's hand: walks the rows oldest first; undefined when it must start over. */
  #hand: MapIterator<[string, L1Row]> | undefined;
  #bytes = 0;

  constructor(policy: L1Policy, jitter: number) {
    this.#policy = policy;
    this.#jitter = jitter;
    this.#maxRowBytes = Math.max(1, Math.floor(policy.maxBytes / 8));
  }

  /** The row if present and not past its L1 lifetime at `now` (this process's clock, ms). */
  get(id: string, now: number): L1Row | undefined {
    const row = this.#rows.get(id);
    if (row === undefined) return undefined;
    if (now >= row.expiresAt) {
      this.#remove(id, row);
      return undefined;
    }
    row.visited = true;
    return row;
  }

  /**
   * Stores `envelope`'s row for at most `l1.ttlMs` (jittered), never past its
   * hard TTL, evicting rows until it fits.
   *
   * @param now this process's clock, ms.
   * @returns true when the row was stored (false: already past its hard TTL, or too large).
   */
  set(id: string, envelope: Envelope, now: number): boolean {
    const remainingMs = envelope.hardExpiresAt - now;
    const bytes = ROW_OVERHEAD_BYTES + stringBytes(envelope.json) + stringBytes(id);
    const old = this.#rows.get(id);
    if (old !== undefined) this.#remove(id, old);
    if (remainingMs <= 0 || bytes > this.#maxRowBytes) return false;
    const ttlMs = Math.min(this.#policy.ttlMs * (1 + Math.random() * this.#jitter), remainingMs);
    while (
      this.#rows.size > 0 &&
      (this.#rows.size >= this.#policy.maxEntries || this.#bytes + bytes > this.#policy.maxBytes)
    ) {
      this.#evictOne(now);
    }
    this.#rows.set(id, new L1Row(envelope, now + Math.max(1, Math.floor(ttlMs)), bytes));
    this.#bytes += bytes;
    return true;
  }

  /** The row, even past its L1 lifetime, without counting a hit (coherence checks). */
  peek(id: string): L1Row | undefined {
    return this.#rows.get(id);
  }

  /** Drops `id`'s row. */
  delete(id: string): void {
    const row = this.#rows.get(id);
    if (row !== undefined) this.#remove(id, row);
  }

  /** Remaining L1 lifetime of `id` at `now`, ms (0 if absent); for tests and diagnostics. */
  remainingTtlMs(id: string, now: number): number {
    const row = this.#rows.get(id);
    return row === undefined ? 0 : Math.max(0, row.expiresAt - now);
  }

  /** Drops every row. */
  clear(): void {
    this.#rows.clear();
    this.#bytes = 0;
    this.#hand = undefined;
  }

  get size(): number {
    return this.#rows.size;
  }

  /** What the rows count against `maxBytes`: their estimated heap bytes. */
  get bytes(): number {
    return this.#bytes;
  }

  #remove(id: string, row: L1Row): void {
    this.#rows.delete(id);
    this.#bytes -= row.bytes;
  }

  /**
   * SIEVE: the hand moves from older rows to newer ones, clearing the bit of
   * each hit row, and evicts the first row not hit (or past its lifetime);
   * past the newest it starts again at the oldest. Call only with rows held.
   */
  #evictOne(now: number): void {
    for (;;) {
      this.#hand ??= this.#rows.entries();
      const next = this.#hand.next();
      if (next.done === true) {
        this.#hand = undefined;
        continue;
      }
      const [id, row] = next.value;
      if (row.visited && now < row.expiresAt) {
        row.visited = false;
        continue;
      }
      this.#remove(id, row);
      return;
    }
  }
}
