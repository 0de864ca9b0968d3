/**
 * The answer of a read served from an L1 row. The row holds the value's JSON
 * text only (what `l1.maxBytes` counts), so `value` is decoded on first
 * access, once per answer: the HTTP path sends `json` and never pays for it;
 * each library caller gets its own copy of the value.
 */
import { entityTag } from './etag.js';
import type { L1Row } from './l1.js';
import type { FoundResult, NotFoundResult, ReadResult } from './types.js';

const UNDECODED: unique symbol = Symbol('undecoded');
/** The answer's row (for its entity tag). */
const ROW: unique symbol = Symbol('row');
/** The decoded value, or {@link UNDECODED}. */
const VALUE: unique symbol = Symbol('value');

/** A found answer from L1: `value` is `JSON.parse(json)`, decoded when first read. */
interface RowAnswer extends FoundResult {
  readonly [ROW]: L1Row;
  [VALUE]: unknown;
  /** The entity tag of `json`, kept on the row: computed on its first answer only. */
  readonly etag: string;
}

/** What an answer holds itself: every field but `value` (decoded on first read) and `etag`. */
interface AnswerFields {
  found: true;
  layer: 'l1';
  coalesced: boolean;
  stale: boolean;
  version: number;
  ttlMs: number;
  stored: false;
  json: string;
  [ROW]: L1Row;
  [VALUE]: unknown;
}

/**
 * The prototype of every L1 answer: the lazy `value`, `etag` and `toJSON`.
 *
 * An answer is `Object.create(ANSWER)` given its fields, not a class instance: `Promise.resolve`
 * looks up `then` on what it is given, and V8 proves "no `then`" when it compiles for this shape
 * (a plain prototype) but not for a constructed instance, which pays a runtime lookup on every
 * hit instead. Its plain fields are its own, so a spread or `Object.keys` sees them (all but
 * `value`, a getter: `{ ...r, value: r.value }` copies it too). Measured by
 * `bench:peers --only warm` (docs/benchmarks.md, "warm").
 */
const ANSWER = {
  /**
   * The value, decoded from `json` on first access: each answer its own copy. An answer frozen
   * before its first access cannot keep the copy: each access decodes one.
   */
  get value(): unknown {
    const self = this as unknown as AnswerFields;
    if (self[VALUE] !== UNDECODED) return self[VALUE];
    const value: unknown = JSON.parse(self.json);
    Reflect.set(self, VALUE, value);
    return value;
  },
  /** Replaces this answer's value (as on any other answer); `json` still says what was read. */
  set value(value: unknown) {
    (this as unknown as AnswerFields)[VALUE] = value;
  },
  get etag(): string {
    return (this as unknown as AnswerFields)[ROW].etag;
  },
  /** Plain fields, `value` included, for `JSON.stringify` and logs. */
  toJSON(): object {
    const { found, layer, coalesced, stale, version, ttlMs, stored, json, value } =
      this as unknown as RowAnswer;
    return { found, layer, coalesced, stale, version, ttlMs, stored, json, value };
  },
};

/** An answer on `row`; every answer gets its fields in this order (one shape). */
function answerOf(row: L1Row, coalesced: boolean, ttlMs: number): RowAnswer {
  const a = Object.create(ANSWER) as AnswerFields;
  a.found = true;
  a.layer = 'l1';
  a.coalesced = coalesced;
  a.stale = ttlMs <= 0;
  a.version = row.version;
  a.ttlMs = ttlMs;
  a.stored = false;
  a.json = row.json;
  a[ROW] = row;
  a[VALUE] = UNDECODED;
  return a as unknown as RowAnswer;
}

/**
 * The strong entity tag of a found answer's `json` (see `etag.ts`): an L1
 * answer's comes from its row, computed once; any other is computed now.
 */
export function entityTagOf(result: FoundResult): string {
  return Object.getPrototypeOf(result) === ANSWER
    ? (result as RowAnswer).etag
    : entityTag(result.json);
}

/** The answer of a plain L1 hit on a found `row` with `ttlMs` (> 0) of its soft TTL left. */
export function freshAnswer(row: L1Row, ttlMs: number): FoundResult {
  return answerOf(row, false, ttlMs);
}

/**
 * The answer of a read served from `row` at `now` (this process's clock);
 * `coalesced` when the caller attached to another's flight (stale-if-error);
 * `stale` when it is served stale whatever its TTL says (a soft purge).
 */
export function rowAnswer(row: L1Row, now: number, coalesced = false, stale = false): ReadResult {
  const ttlMs = stale ? Math.min(0, row.softExpiresAt - now) : row.softExpiresAt - now;
  if (!row.negative) return answerOf(row, coalesced, ttlMs);
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
