/**
 * The answer of a read served from an L1 row. The row holds the value's JSON
 * text only (what `l1.maxBytes` counts), so `value` is decoded on first
 * access, once per answer: the HTTP path sends `json` and never pays for it;
 * each library caller gets its own copy of the value.
 */
import type { L1Row } from './l1.js';
import type { FoundResult, NotFoundResult, ReadLayer, ReadResult } from './types.js';

const UNDECODED: unique symbol = Symbol('undecoded');

/** A found answer from L1: `value` is `JSON.parse(json)`, decoded when first read. */
class RowAnswer implements FoundResult {
  readonly found = true as const;
  readonly layer: ReadLayer;
  readonly coalesced: boolean;
  readonly stale: boolean;
  readonly version: number;
  readonly ttlMs: number;
  readonly stored = false;
  readonly json: string;
  #value: unknown = UNDECODED;

  constructor(row: L1Row, coalesced: boolean, ttlMs: number) {
    this.layer = 'l1';
    this.coalesced = coalesced;
    this.stale = ttlMs <= 0;
    this.version = row.version;
    this.ttlMs = ttlMs;
    this.json = row.json;
  }

  /** The value, decoded from `json` on first access. */
  get value(): unknown {
    if (this.#value === UNDECODED) this.#value = JSON.parse(this.json);
    return this.#value;
  }

  /** Plain fields, `value` included, for `JSON.stringify` and logs. */
  toJSON(): object {
    const { found, layer, coalesced, stale, version, ttlMs, stored, json, value } = this;
    return { found, layer, coalesced, stale, version, ttlMs, stored, json, value };
  }
}

/**
 * The answer of a read served from `row` at `now` (this process's clock);
 * `coalesced` when the caller attached to another's flight (stale-if-error).
 */
export function rowAnswer(row: L1Row, now: number, coalesced = false): ReadResult {
  const ttlMs = row.softExpiresAt - now;
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
