/**
 * The in-process L1 (lru-cache), its rows and what they cost. A row keeps the
 * value's JSON text, never the decoded value: the text is what the HTTP path
 * sends, and what a row costs can then be counted (a decoded value's heap
 * size cannot). Library callers decode on demand (`answers.ts`).
 */

import { LRUCache } from 'lru-cache';
import type { Envelope } from '../l2/format.js';
import { SHARED_ANSWER_BYTES, sharedAnswer } from './answers.js';
import { entityTag } from './etag.js';
import type { L1Policy } from './policy.js';
import type { FoundResult, ReadResult } from './types.js';

/**
 * Heap bytes of one row besides its two strings, measured on Node 20 x64
 * (`npm run bench:memory` prints the calibration): the row object and its
 * boxed version, the Map entry with the table's growth slack, and the header
 * of an L2 value the JSON text may still point into. High enough for a
 * process up 24 days, when its millisecond times no longer fit a small
 * integer and each takes a box too. The row's `born` (a boxed µs time) and
 * its `tags` field take 24 bytes more than that calibration (272) measured,
 * and its two shared-answer fields 16 more (the answer itself is counted
 * when it is made: {@link L1.share}).
 */
export const ROW_OVERHEAD_BYTES = 312;

/** Heap bytes of a row's tags: the array (16 + 8 per tag) and each tag's string. */
function tagsBytes(tags: readonly string[] | undefined): number {
  if (tags === undefined) return 0;
  let bytes = 16 + 8 * tags.length;
  for (const tag of tags) bytes += stringBytes(tag, tag.length);
  return bytes;
}

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
  /**
   * When its data was read from the source, µs on Valkey's clock (see `Envelope.born`); raised
   * past the newest purge a read found not to cover it (`Table.get`), so the next hit needs one
   * comparison again. Raising it changes no judgement: a later purge covers the row by its
   * tags exactly when it would have by the first `born`.
   */
  born: number;
  /** Its purge tags; undefined when untagged. */
  readonly tags: readonly string[] | undefined;
  /** Leaves L1 at this instant (this process's clock): the jittered `l1.ttlMs`, never past `hardExpiresAt`. */
  readonly expiresAt: number;
  /**
   * The heap it takes (what it counts against `maxBytes`, at least the per-row floor), its
   * shared answer included once it has one.
   */
  bytes: number;
  /** The answer every fresh hit of this row shares (`answers.ts`), from its first fresh hit on. */
  answer: FoundResult | undefined = undefined;
  /** That answer as a settled promise: what `Table.get` returns for it. */
  answered: Promise<ReadResult> | undefined = undefined;
  /** The entity tag of `json`, computed on the first answer that needs it (a hit then pays nothing). */
  #etag: string | undefined;

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
    this.born = envelope.born ?? 0;
    this.tags = envelope.tags;
    this.expiresAt = Math.floor(expiresAt);
    this.bytes = bytes;
  }

  /** The strong entity tag of `json` (see `etag.ts`), computed once per row. */
  get etag(): string {
    if (this.#etag === undefined) this.#etag = entityTag(this.json);
    return this.#etag;
  }
}

/**
 * The in-process L1: lru-cache (least recently used goes first), bounded by
 * rows and by the heap they really take. Each row lives for the jittered
 * `l1.ttlMs`, never past its hard TTL (between soft and hard expiry it is
 * served stale while one caller refreshes it); lifetimes are checked here on
 * this process's clock, so lru-cache keeps no timers or TTL arrays.
 *
 * Both bounds are one: a row counts against `maxBytes` at least
 * `maxBytes ÷ maxEntries`, so no more than `maxEntries` rows fit, without
 * lru-cache preallocating arrays for `maxEntries` rows (it would, given `max`).
 *
 * L1 does not compare versions: the owner decides what may be stored (a
 * superseded flight or a refused fill never reaches `set`; coherence events
 * drop rows newer-wins), see docs/ordering.md. A row larger than an eighth of
 * `maxBytes` is not kept: the fill still answers its callers (pass-through,
 * never failure).
 */
export class L1 {
  readonly #cache: LRUCache<string, L1Row>;
  readonly #policy: L1Policy;
  readonly #jitter: number;
  readonly #maxRowBytes: number;
  /** The heap the rows take (their `bytes`), without the per-row floor. */
  #bytes = 0;

  constructor(policy: L1Policy, jitter: number) {
    this.#policy = policy;
    this.#jitter = jitter;
    this.#maxRowBytes = Math.max(1, Math.floor(policy.maxBytes / 8));
    const floorBytes = Math.max(1, Math.floor(policy.maxBytes / policy.maxEntries));
    this.#cache = new LRUCache<string, L1Row>({
      maxSize: policy.maxBytes,
      sizeCalculation: (row) => Math.max(row.bytes, floorBytes),
      dispose: (row) => {
        this.#bytes -= row.bytes;
      },
    });
  }

  /** The row if present and not past its L1 lifetime at `now` (this process's clock, ms). */
  get(id: string, now: number): L1Row | undefined {
    const row = this.#cache.get(id);
    if (row === undefined) return undefined;
    if (now >= row.expiresAt) {
      this.#cache.delete(id);
      return undefined;
    }
    return row;
  }

  /**
   * Stores `envelope`'s row for at most `l1.ttlMs` (jittered), never past its
   * hard TTL, evicting the least recently used rows until it fits.
   *
   * @param now this process's clock, ms.
   * @returns true when the row was stored (false: already past its hard TTL, or too large).
   */
  set(id: string, envelope: Envelope, now: number): boolean {
    const remainingMs = envelope.hardExpiresAt - now;
    const bytes =
      ROW_OVERHEAD_BYTES + stringBytes(envelope.json) + stringBytes(id) + tagsBytes(envelope.tags);
    if (remainingMs <= 0 || bytes > this.#maxRowBytes) {
      this.#cache.delete(id);
      return false;
    }
    const ttlMs = Math.min(this.#policy.ttlMs * (1 + Math.random() * this.#jitter), remainingMs);
    this.#cache.set(id, new L1Row(envelope, now + Math.max(1, Math.floor(ttlMs)), bytes));
    this.#bytes += bytes;
    return true;
  }

  /**
   * The shared answer of `id`'s found `row` (just read by {@link get}), made now and counted
   * against `maxBytes` from now on ({@link SHARED_ANSWER_BYTES} more for the row, which may
   * evict others); undefined when the row would grow past the largest kept.
   *
   * @param now the hit clock the answer reads its `ttlMs` from, ms.
   */
  share(id: string, row: L1Row, now: () => number): FoundResult | undefined {
    if (row.bytes + SHARED_ANSWER_BYTES > this.#maxRowBytes) return undefined;
    // lru-cache sizes an entry when it is set: the row is set again at its new size.
    this.#cache.delete(id);
    row.bytes += SHARED_ANSWER_BYTES;
    row.answer = sharedAnswer(row, now);
    this.#cache.set(id, row);
    this.#bytes += row.bytes;
    return row.answer;
  }

  /** The row, even past its L1 lifetime, without touching recency (coherence checks). */
  peek(id: string): L1Row | undefined {
    return this.#cache.peek(id);
  }

  /** Drops `id`'s row. */
  delete(id: string): void {
    this.#cache.delete(id);
  }

  /** Remaining L1 lifetime of `id` at `now`, ms (0 if absent); for tests and diagnostics. */
  remainingTtlMs(id: string, now: number): number {
    const row = this.#cache.peek(id);
    return row === undefined ? 0 : Math.max(0, row.expiresAt - now);
  }

  /** Drops every row. */
  clear(): void {
    this.#cache.clear();
  }

  get size(): number {
    return this.#cache.size;
  }

  /** What the rows take: their estimated heap bytes. */
  get bytes(): number {
    return this.#bytes;
  }
}
