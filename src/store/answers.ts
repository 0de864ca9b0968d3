/**
 * The answer of a read served from an L1 row. The row holds the value's JSON
 * text only (what `l1.maxBytes` counts), so `value` is decoded on first
 * access, once per answer: the HTTP path sends `json` and never pays for it;
 * each library caller gets its own copy of the value.
 */
import { entityTag } from './etag.js';
import type { L1Row } from './l1.js';
import type { FoundResult, NotFoundResult, ReadLayer, ReadResult } from './types.js';

const UNDECODED: unique symbol = Symbol('undecoded');

/**
 * A found answer from L1: `value` is `JSON.parse(json)`, decoded when first read.
 *
 * Its fields are `declare`d and set once, in the constructor: a class field
 * with or without an initializer is defined on every instance before the
 * constructor body runs, so each answer (one per L1 hit) would pay its stores twice.
 */
class RowAnswer implements FoundResult {
  declare readonly found: true;
  declare readonly layer: ReadLayer;
  declare readonly coalesced: boolean;
  declare readonly stale: boolean;
  declare readonly version: number;
  declare readonly ttlMs: number;
  declare readonly stored: false;
  declare readonly json: string;
  readonly #row: L1Row;
  #value: unknown;

  constructor(row: L1Row, coalesced: boolean, ttlMs: number) {
    this.found = true;
    this.layer = 'l1';
    this.coalesced = coalesced;
    this.stale = ttlMs <= 0;
    this.version = row.version;
    this.ttlMs = ttlMs;
    this.stored = false;
    this.json = row.json;
    this.#row = row;
    this.#value = UNDECODED;
  }

  /** The value, decoded from `json` on first access. */
  get value(): unknown {
    if (this.#value === UNDECODED) this.#value = JSON.parse(this.json);
    return this.#value;
  }

  /** The entity tag of `json`, kept on the row: computed on its first answer only. */
  get etag(): string {
    return this.#row.etag;
  }

  /** Plain fields, `value` included, for `JSON.stringify` and logs. */
  toJSON(): object {
    const { found, layer, coalesced, stale, version, ttlMs, stored, json, value } = this;
    return { found, layer, coalesced, stale, version, ttlMs, stored, json, value };
  }
}

/**
 * The strong entity tag of a found answer's `json` (see `etag.ts`): an L1
 * answer's comes from its row, computed once; any other is computed now.
 */
export function entityTagOf(result: FoundResult): string {
  return result instanceof RowAnswer ? result.etag : entityTag(result.json);
}

/** The answer of a plain L1 hit on a found `row` with `ttlMs` (> 0) of its soft TTL left. */
export function freshAnswer(row: L1Row, ttlMs: number): FoundResult {
  return new RowAnswer(row, false, ttlMs);
}

/**
 * The answer of a read served from `row` at `now` (this process's clock);
 * `coalesced` when the caller attached to another's flight (stale-if-error);
 * `stale` when it is served stale whatever its TTL says (a soft purge).
 */
export function rowAnswer(row: L1Row, now: number, coalesced = false, stale = false): ReadResult {
  const ttlMs = stale ? Math.min(0, row.softExpiresAt - now) : row.softExpiresAt - now;
  if (!row.negative) return new RowAnswer(row, coalesced, ttlMs);
  const missing: NotFoundResult = {
    found: false,
    layer: 'l1',
    coalesced,
    stale: ttlMs <= 0,
    version: row.version,
    ttlMs,
    stored: false,
  };
  return missing;
}
