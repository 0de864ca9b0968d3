/**
 * The answers of reads served from an L1 row. The row holds the value's JSON
 * text only (what `l1.maxBytes` counts), so `value` is decoded from it when
 * read: the HTTP path sends `json` and never pays for it, and each library
 * caller gets a copy of its own.
 *
 * A fresh hit answers with its row's shared answer ({@link sharedAnswer}): one frozen object per
 * row, made on its first fresh hit and given to every fresh hit after it (with one settled
 * promise, `Table.get`), so a hit allocates nothing. Its `ttlMs` and `stale` are read from the
 * hit clock when accessed, and its `value` is decoded on each access. Any other read from a row
 * (stale, not found, coalesced, soft-purged) gets an answer of its own ({@link rowAnswer}).
 */
import { entityTag } from './etag.js';
import type { L1Row } from './l1.js';
import type { FoundResult, NotFoundResult, ReadResult } from './types.js';

const UNDECODED: unique symbol = Symbol('undecoded');
/** The answer's row (for its entity tag). */
const ROW: unique symbol = Symbol('row');
/** The decoded value, or {@link UNDECODED}. */
const VALUE: unique symbol = Symbol('value');
/** A shared answer's clock (the table's hit clock), ms. */
const NOW: unique symbol = Symbol('now');

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
 * The prototype of an L1 answer of its own ({@link rowAnswer}): the lazy `value`, `etag` and
 * `toJSON`.
 *
 * An answer is `Object.create(ANSWER)` given its fields, not a class instance: `Promise.resolve`
 * looks up `then` on what it is given, and V8 proves "no `then`" when it compiles for this shape
 * (a plain prototype) but not for a constructed instance, which pays a runtime lookup on every
 * call instead. Its plain fields are its own, so a spread or `Object.keys` sees them (all but
 * `value`, a getter: `{ ...r, value: r.value }` copies it too).
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
 * The prototype of a row's shared answer: {@link ANSWER}'s `etag` and `toJSON`, and a `value`
 * decoded on each access (the answer is shared, so a decoded copy is not kept on it).
 */
const SHARED = Object.create(ANSWER, {
  value: {
    get(this: AnswerFields): unknown {
      return JSON.parse(this.json);
    },
  },
});

/** Heap bytes a row's shared answer and its settled promise take (Node 20 x64), counted by L1. */
export const SHARED_ANSWER_BYTES = 192;

/** The TTL left of a shared answer's row on its clock, ms: its `ttlMs`. */
function ttlLeft(this: AnswerFields & { [NOW]: () => number }): number {
  return this[ROW].softExpiresAt - this[NOW]();
}

/** Whether a shared answer's row is past its soft TTL on its clock: its `stale`. */
function pastTtl(this: AnswerFields): boolean {
  return this.ttlMs <= 0;
}

/**
 * The answer every fresh hit on the found `row` shares (see the file's comment): frozen, its
 * `ttlMs` and `stale` read from `now` (the hit clock, ms) when accessed, its `value` decoded on
 * each access. Its plain fields are its own, in every answer's order, so a spread or
 * `Object.keys` sees them (all but `value`: `{ ...r, value: r.value }` copies it too).
 */
export function sharedAnswer(row: L1Row, now: () => number): FoundResult {
  const a = Object.create(SHARED) as AnswerFields & { [NOW]: () => number };
  a.found = true;
  a.layer = 'l1';
  a.coalesced = false;
  Object.defineProperty(a, 'stale', { get: pastTtl, enumerable: true });
  a.version = row.version;
  Object.defineProperty(a, 'ttlMs', { get: ttlLeft, enumerable: true });
  a.stored = false;
  a.json = row.json;
  a[ROW] = row;
  a[NOW] = now;
  return Object.freeze(a) as unknown as FoundResult;
}

/**
 * The strong entity tag of a found answer's `json` (see `etag.ts`): an L1
 * answer's comes from its row, computed once; any other is computed now.
 */
export function entityTagOf(result: FoundResult): string {
  const proto: unknown = Object.getPrototypeOf(result);
  return proto === ANSWER || proto === SHARED ? (result as RowAnswer).etag : entityTag(result.json);
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
