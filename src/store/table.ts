/**
 * A table's public surface: the read path that runs in the caller (an L1 hit
 * never enters the owner's mailbox), writes, stats, and the id rules every
 * entry point checks before anything touches Valkey or the source.
 */

import type { TableContext } from '../actor/flight.js';
import type { Miss, RefreshReason } from '../actor/messages.js';
import type { TableOwner } from '../actor/owner.js';
import {
  BadIdError,
  BadPurgeError,
  BadRequestError,
  BadValueError,
  ClosedError,
  EchoStoreError,
  InternalError,
  LoadFailedError,
  LoadTimeoutError,
  WaitTimeoutError,
} from '../errors.js';
import { toJson } from '../l2/format.js';
import { type PendingRead, WaitDeadlines } from '../protection/deadlines.js';
import { rowAnswer } from './answers.js';
import { type Epochs, HARD_PURGED, NOT_PURGED } from './epochs.js';
import { entityTag } from './etag.js';
import { xfetchDue, xfetchPossible } from './freshness.js';
import type { L1, L1Row } from './l1.js';
import { LoadResult } from './load-result.js';
import type { TablePolicy } from './policy.js';
import { purgeTags } from './tags.js';
import type { TableTracer } from './tracing.js';
import type {
  BatchEntry,
  FoundResult,
  PurgeInput,
  PurgeResult,
  ReadResult,
  TableStats,
  WriteResult,
} from './types.js';

/** Table names: lowercase letters, digits, `_` and `-`, 1–64 characters. */
export const TABLE_NAME = /^[a-z0-9_-]{1,64}$/;

/** Names a table may not take: they collide with JavaScript object internals. */
export const RESERVED_TABLE_NAMES: ReadonlySet<string> = new Set([
  '__proto__',
  'constructor',
  'prototype',
]);

/** Longest id accepted, in UTF-8 bytes. */
export const MAX_ID_BYTES = 512;

/** Most ids one `Table.getMany` call (and one batch read over HTTP) may name, duplicates counted. */
export const MAX_BATCH_IDS = 1000;

/**
 * The byte budget of one wave of a batch read (UTF-16 characters of JSON text,
 * estimated from the table's row size): 2 MiB. A wave's Valkey replies then
 * arrive within a few milliseconds of each other, and decoding them holds the
 * event loop for about as long.
 */
export const BATCH_WAVE_BYTES = 2 * 1024 * 1024;

/** Ids in a batch's first wave while the table's row size is not known yet. */
export const FIRST_WAVE_IDS = 64;

// Not printable: C0/C1 controls and DEL (Cc), invisible format characters such
// as U+202E RIGHT-TO-LEFT OVERRIDE, U+200B and the BOM (Cf), line and paragraph
// separators (Zl, Zp), and the Unicode noncharacters.
const NOT_PRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\uFDD0-\uFDEF\uFFFE\uFFFF]/u;

/**
 * Checks an item id: 1–512 bytes of well-formed, printable UTF-8 (no control,
 * format or separator characters, no noncharacters), and the table's own
 * `idPattern` when it has one.
 *
 * @throws {BadIdError} `ECC_BAD_ID`, before anything touches Valkey or the source.
 */
export function assertId(
  table: string,
  id: unknown,
  pattern?: RegExp,
  sourceRule?: (id: string) => void,
): asserts id is string {
  if (typeof id !== 'string' || id.length === 0) {
    throw new BadIdError('id must be a non-empty string', { table });
  }
  if (!id.isWellFormed()) {
    throw new BadIdError('id must be well-formed UTF-8', { table });
  }
  // A UTF-16 code unit is at most 3 UTF-8 bytes: short ids need no byte count.
  if (id.length > MAX_ID_BYTES / 3 && Buffer.byteLength(id, 'utf8') > MAX_ID_BYTES) {
    throw new BadIdError(`id must be at most ${MAX_ID_BYTES} bytes of UTF-8`, { table });
  }
  if (NOT_PRINTABLE.test(id)) {
    throw new BadIdError('id must be printable (no control, format or separator characters)', {
      table,
    });
  }
  if (pattern !== undefined && !pattern.test(id)) {
    throw new BadIdError(`id must match ${pattern.source}`, { table });
  }
  sourceRule?.(id);
}

/** An L1 row as {@link Table.inspectL1} reports it; times are milliseconds left from now. */
export interface L1Inspection {
  version: number;
  /** A cached "not found". */
  negative: boolean;
  /** Until stale (soft TTL); negative when it already is. */
  softTtlMs: number;
  /** Until gone (hard TTL). */
  hardTtlMs: number;
  /** Until it leaves L1 (the jittered `l1.ttlMs`, never past the hard TTL). */
  l1TtlMs: number;
  /** How long the load that produced it took. */
  deltaMs: number;
  /** Heap bytes it counts against `l1.maxBytes`. */
  bytes: number;
  /** Its purge tags, in stored order; empty when untagged. */
  tags: string[];
  /** A purge this instance knows of covers it: `hard` (the next read reloads it), `soft` (served stale while one refresh runs), else null. */
  purged: PurgeKind | null;
}

/** What a purge made of a row: dropped (`hard`) or stale (`soft`). */
export type PurgeKind = 'hard' | 'soft';

/**
 * The facade callers use for one table (cache-aside with single-flight).
 *
 * A read runs in the caller: an L1 hit is answered here and never enters the
 * owner's mailbox; only a miss becomes a `miss` message.
 */
export class Table {
  /** The table's name (`[a-z0-9_-]{1,64}`). */
  readonly name: string;
  /** The resolved policy (defaults applied). */
  readonly policy: TablePolicy;
  readonly #ctx: TableContext;
  readonly #l1: L1;
  readonly #owner: TableOwner;
  readonly #deadlines: WaitDeadlines;
  readonly #hitNow: () => number;
  readonly #counters: TableContext['counters'];
  readonly #epochs: Epochs;
  /** `earlyRefreshBeta` (XFetch), read once. */
  readonly #beta: number;
  /** The running average size of a row read by a batch, UTF-16 characters of JSON; 0 before any. */
  #rowChars = 0;
  /** The last miss posted: misses of its id coalesce onto it while the owner has not handled it. */
  #open: Miss | undefined;
  #closed = false;

  /**
   * @internal Built by `createStore`.
   * @param hitNow the clock of the L1 hit path (`clock.ts`); `ctx.now` by default.
   * @param tracer with tracing on, `get` is wrapped in a span once, here; off, `get` is the plain one.
   */
  constructor(
    ctx: TableContext,
    l1: L1,
    owner: TableOwner,
    hitNow: () => number = ctx.now,
    tracer?: TableTracer,
  ) {
    this.name = ctx.name;
    this.policy = ctx.policy;
    this.#ctx = ctx;
    this.#l1 = l1;
    this.#owner = owner;
    this.#hitNow = hitNow;
    this.#counters = ctx.counters;
    this.#epochs = ctx.epochs;
    this.#beta = ctx.policy.earlyRefreshBeta;
    this.#deadlines = new WaitDeadlines(
      ctx.policy.waitTimeoutMs,
      (id) =>
        new WaitTimeoutError(`no answer within waitTimeoutMs (${ctx.policy.waitTimeoutMs} ms)`, {
          table: ctx.name,
          id,
        }),
    );
    if (tracer !== undefined) {
      const untraced = this.get.bind(this);
      this.get = (id) => tracer.read(id, () => untraced(id));
    }
    // Compiles the id rules' regular expressions now rather than on the first misses: V8 runs a
    // regular expression's first match in its interpreter and compiles it on the second (for
    // NOT_PRINTABLE's Unicode classes, from ICU's tables: 0.9 M instructions of a cold read).
    for (let i = 0; i < 2; i++) {
      assertId(this.name, 'id', undefined);
      this.policy.idPattern?.test('');
    }
  }

  /**
   * Reads an item: L1, else the owner's flight (L2, else the loader).
   *
   * @param id 1–512 bytes of printable UTF-8 (and the table's `idPattern`).
   * @returns `{ found: true, value, json, layer, coalesced, version, stale, ttlMs }`,
   *   or `{ found: false, … }` when the source has no such item.
   * @throws (rejects) `ECC_BAD_ID`, `ECC_LOAD_FAILED`, `ECC_BAD_VALUE`,
   *   `ECC_LOAD_TIMEOUT`, `ECC_SHED`, `ECC_CLOSED` — see `errors.ts`; concurrent
   *   callers of one flight receive the same error object. `ECC_WAIT_TIMEOUT`
   *   when this caller waited `waitTimeoutMs` (each caller its own).
   */
  get(id: string): Promise<ReadResult> {
    const open = this.#open;
    if (open !== undefined) {
      // While a miss waits in the mailbox, L1 holds no row of its id: only the owner's handlers
      // fill L1, and no caller runs between a handler and the end of its drain, which takes the
      // miss. A reader of that id joins it without looking.
      if (!open.open) this.#open = undefined;
      else if (open.id === id && this.#ctx.coalesces) return this.#join(open);
    }
    const now = this.#hitNow();
    // Only ids that passed assertId are ever stored, so a hit needs no id check.
    const row = typeof id === 'string' ? this.#l1.get(id, now) : undefined;
    if (row === undefined) return this.#miss(id);
    // Every row read from the source since the last purge was born after it: one comparison.
    if (row.born <= this.#epochs.newest) {
      const purged = this.#purgedHit(id, row, now);
      if (purged !== undefined) return purged;
    }
    const answer = this.#hit(id, row, now);
    if (answer !== row.answer) return Promise.resolve(answer);
    // A fresh hit answers with its row's shared answer: every such hit with one settled promise.
    row.answered ??= Promise.resolve(answer);
    return row.answered;
  }

  /**
   * @internal The HTTP hit path's read (`l1-hits.ts`): {@link get}'s answer
   * when a found L1 row no known purge can cover answers it, counted and
   * refreshed as `get` does, at once; `undefined`, with nothing counted, when
   * `get` must decide (no row, a cached "not found", a row born before a
   * purge). Untraced: not for a store with `tracing`.
   */
  hit(id: string): FoundResult | undefined {
    const now = this.#hitNow();
    const row = this.#l1.get(id, now);
    if (row === undefined || row.negative || row.born <= this.#epochs.newest) return undefined;
    return this.#hit(id, row, now) as FoundResult;
  }

  /** The answer of an L1 hit on `row` no purge covers: counted, and a refresh asked for when due. */
  #hit(id: string, row: L1Row, now: number): ReadResult {
    const ttlMs = row.softExpiresAt - now;
    // The usual hit (fresh, found, confirmed) stays small: the others are #otherHit.
    if (ttlMs <= 0 || row.negative || this.#owner.unconfirmed(id)) {
      return this.#otherHit(id, row, now);
    }
    const counters = this.#counters;
    counters.hits++;
    counters.reads.l1++;
    const beta = this.#beta;
    if (beta > 0 && xfetchPossible(row, now, beta) && xfetchDue(row, now, beta)) {
      this.#refresh(id, 'early', now);
    }
    return row.answer ?? this.#l1.share(id, row, this.#hitNow) ?? rowAnswer(row, now);
  }

  /** An L1 hit on a row that is stale, negative, or loaded while Valkey was unusable. */
  #otherHit(id: string, row: L1Row, now: number): ReadResult {
    const counters = this.#counters;
    counters.hits++;
    // Loaded while Valkey was unusable: once it is usable again, the first read re-validates it.
    if (this.#owner.unconfirmed(id) && this.#ctx.l2.usable) this.#refresh(id, 'revalidate', now);
    if (now < row.softExpiresAt) {
      if (row.negative) counters.reads.negative++;
      else counters.reads.l1++;
      const beta = this.#beta;
      if (beta > 0 && xfetchPossible(row, now, beta) && xfetchDue(row, now, beta)) {
        this.#refresh(id, 'early', now);
      }
    } else {
      // Between soft and hard TTL: answer stale now, one background refresh (stale-while-revalidate).
      counters.reads.stale++;
      this.#refresh(id, 'stale', now);
    }
    return rowAnswer(row, now);
  }

  /**
   * An L1 hit on a row born before a purge this instance knows of: a hard purge
   * covering it makes it a miss (dropped from L1), a soft one serves it stale
   * while one refresh runs; undefined when no purge covers it (a plain hit).
   */
  #purgedHit(id: string, row: L1Row, now: number): Promise<ReadResult> | undefined {
    const purge = this.#epochs.judge(row.born, row.tags);
    if (purge === NOT_PURGED) {
      // No purge held covers it: proven clear of them all, the next hit pays one comparison.
      row.born = this.#epochs.newest + 1;
      return undefined;
    }
    const counters = this.#counters;
    if (purge === HARD_PURGED) {
      this.#l1.delete(id);
      counters.purgedRows.hard++;
      return this.#miss(id);
    }
    counters.hits++;
    if (row.negative) counters.reads.negative++;
    else counters.reads.stale++;
    if (this.#owner.wantsRefresh(id, now)) {
      counters.purgedRows.soft++;
      this.#owner.post({ kind: 'refresh', id, reason: 'purge' });
    }
    return Promise.resolve(rowAnswer(row, now, false, true));
  }

  /**
   * A miss: the id rules, then a `miss` message, left open for readers of the
   * id to join ({@link #join}) until the owner handles it. No caller waits
   * longer than waitTimeoutMs, whatever its flight is doing (one timer per
   * table keeps that bound); the flight itself goes on and fills the cache
   * for the next caller.
   */
  #miss(id: string): Promise<ReadResult> {
    try {
      assertId(this.name, id, this.policy.idPattern, this.#ctx.checkId);
    } catch (err) {
      return Promise.reject(err);
    }
    this.#ctx.counters.misses++;
    const read = this.#deadlines.add(id);
    const miss: Miss = { kind: 'miss', id, waiter: read, open: true };
    this.#open = miss;
    this.#owner.post(miss);
    return read.promise;
  }

  /**
   * A reader of the id whose miss message still waits in the mailbox: it
   * shares that read (a herd in one tick costs one message, two answers and
   * one extra pending read, whatever its size).
   */
  #join(open: Miss): Promise<ReadResult> {
    this.#ctx.counters.misses++;
    let coalesced = open.coalesced as PendingRead | undefined;
    if (coalesced === undefined) {
      coalesced = this.#deadlines.add(open.id);
      open.coalesced = coalesced;
    } else {
      coalesced.count++;
    }
    return coalesced.promise;
  }

  /**
   * Reads an item past L1 and past any flight running now (read-your-writes,
   * once the change stream has passed the caller's commit): a new flight
   * asks Valkey, else the source. Concurrent fresh reads of one id share it.
   *
   * @throws (rejects) as {@link get}.
   */
  getFresh(id: string): Promise<ReadResult> {
    try {
      assertId(this.name, id, this.policy.idPattern, this.#ctx.checkId);
    } catch (err) {
      return Promise.reject(err);
    }
    this.#open = undefined;
    this.#ctx.counters.misses++;
    const read = this.#deadlines.add(id);
    this.#owner.post({ kind: 'miss', id, waiter: read, fresh: true });
    return read.promise;
  }

  /**
   * Reads an item from the source alone, bypassing both layers and storing
   * nothing (read-your-writes when the change stream has not caught up),
   * bounded by `loadTimeoutMs`.
   *
   * @throws (rejects) `ECC_BAD_ID`; `ECC_LOAD_TIMEOUT`; `ECC_LOAD_FAILED` with the loader's error as `cause`.
   */
  async readSource(id: string): Promise<ReadResult> {
    assertId(this.name, id, this.policy.idPattern, this.#ctx.checkId);
    const { loadTimeoutMs } = this.policy;
    const signal = AbortSignal.timeout(loadTimeoutMs);
    let value: unknown;
    try {
      value = await this.#ctx.load(id, { signal });
    } catch (err) {
      if (signal.aborted) {
        throw new LoadTimeoutError(`no answer from the source within ${loadTimeoutMs} ms`, {
          table: this.name,
          id,
          cause: err,
        });
      }
      throw new LoadFailedError('the source failed', { table: this.name, id, cause: err });
    }
    let received: string | undefined;
    if (value instanceof LoadResult) {
      received = value.json;
      value = value.policy.negative === true ? undefined : value.value;
    }
    const base = {
      layer: 'origin',
      coalesced: false,
      version: 0,
      stale: false,
      ttlMs: 0,
      stored: false,
    } as const;
    const json = value === undefined ? undefined : (received ?? toJson(value));
    if (json === undefined) return { ...base, found: false };
    return { ...base, found: true, value, json };
  }

  /**
   * Reads many items at once: each distinct id through the same path as
   * {@link get} (L1 in the caller, then one flight per id, so herds still
   * coalesce and each id keeps its own lease), in waves bounded by bytes (see
   * {@link readWaves}). The misses of a wave are posted to the owner together,
   * so their Valkey reads leave on one connection in the same tick (pipelined:
   * one round trip), and a table with `loadMany` loads them in one source call.
   *
   * Every answer is held until the last one: for rows that may add up to
   * more than the heap should hold at once, use {@link readWaves}.
   *
   * @param ids up to {@link MAX_BATCH_IDS} ids, duplicates counted.
   * @returns one entry per distinct id, in the order of first appearance:
   *   `{ id, ok: true, result }` or `{ id, ok: false, error }`. One id's
   *   failure (a malformed id, a failed load, a shed) never fails the others.
   * @throws (rejects) {@link BadRequestError} `ECC_BAD_REQUEST` when `ids` is
   *   not an array or names more than {@link MAX_BATCH_IDS} ids.
   */
  async getMany(ids: readonly string[]): Promise<BatchEntry[]> {
    const entries: BatchEntry[] = [];
    for await (const wave of this.readWaves(ids)) entries.push(...wave);
    return entries;
  }

  /**
   * Reads many items in waves, so that no Valkey reply of one request
   * outlasts `commandTimeoutMs` (which would open the breaker for every
   * request of the instance) and no wave blocks the event loop for long: each
   * wave names as many ids as fit in `waveBytes` at the row size this table's
   * batches have seen so far (a running average of their JSON text), or
   * {@link FIRST_WAVE_IDS} before it has seen any. The next wave is read only
   * when the caller asks for it, so a consumer that streams the answer out
   * holds one wave at a time.
   *
   * A wave is read by {@link #readWave}: the one place to change how a
   * wave's reads reach Valkey (grouped per cluster slot, for one).
   *
   * @param ids up to {@link MAX_BATCH_IDS} ids, duplicates counted; each
   *   distinct id is read once, in the order of first appearance.
   * @param waveBytes the byte budget of one wave, UTF-16 characters of JSON
   *   text; default {@link BATCH_WAVE_BYTES}.
   * @returns the waves' entries, as {@link getMany} answers them.
   * @throws {BadRequestError} `ECC_BAD_REQUEST` (on the first `next()`) when
   *   `ids` is not an array or names more than {@link MAX_BATCH_IDS} ids.
   */
  async *readWaves(
    ids: readonly string[],
    waveBytes: number = BATCH_WAVE_BYTES,
  ): AsyncGenerator<BatchEntry[], void, undefined> {
    if (!Array.isArray(ids) || ids.length > MAX_BATCH_IDS) {
      throw new BadRequestError(`ids must be an array of at most ${MAX_BATCH_IDS} ids`, {
        table: this.name,
      });
    }
    const distinct = [...new Set(ids)];
    for (let at = 0; at < distinct.length; ) {
      const rowChars = this.#rowChars;
      const size =
        rowChars === 0
          ? FIRST_WAVE_IDS
          : Math.max(1, Math.min(MAX_BATCH_IDS, Math.floor(waveBytes / rowChars)));
      const wave = await this.#readWave(distinct.slice(at, at + size));
      at += size;
      this.#learnRowSize(wave);
      yield wave;
    }
  }

  /**
   * Reads one wave: every id at once, each through {@link get}. One id's
   * failure becomes its entry and never fails the others.
   */
  #readWave(ids: readonly string[]): Promise<BatchEntry[]> {
    return Promise.all(
      ids.map((id) =>
        this.get(id).then(
          (result): BatchEntry => ({ id, ok: true, result }),
          (err: unknown): BatchEntry => ({ id, ok: false, error: this.#asError(err, id) }),
        ),
      ),
    );
  }

  /** Folds a wave's found rows into the running row size (an exponential average, weight ¼ per wave). */
  #learnRowSize(wave: readonly BatchEntry[]): void {
    let chars = 0;
    let rows = 0;
    for (const e of wave) {
      if (e.ok && e.result.found) {
        chars += e.result.json.length;
        rows++;
      }
    }
    if (rows === 0) return;
    const mean = chars / rows;
    this.#rowChars = this.#rowChars === 0 ? mean : 0.75 * this.#rowChars + 0.25 * mean;
  }

  /**
   * Write-through: stores `value` in L2 (`SET … PX`), then in L1, with a new version.
   *
   * @returns the version Valkey ordered the write at, and the entity tag a GET then sends.
   * @param value any JSON-serialisable value.
   * @param received the value's JSON text as the client sent it (a PUT body), stored as is instead
   *   of `JSON.stringify(value)` so that an integer past 2^53 comes back unchanged; it must be
   *   valid JSON that parses to `value`.
   * @throws (rejects) `ECC_BAD_ID`, `ECC_BAD_VALUE` (not serialisable),
   *   `ECC_VALKEY_UNAVAILABLE` (Valkey refused or timed out: L1 is dropped for the id), `ECC_CLOSED`.
   */
  put(id: string, value: unknown, received?: string): Promise<WriteResult> {
    try {
      assertId(this.name, id, this.policy.idPattern, this.#ctx.checkId);
      this.#assertOpen(id);
    } catch (err) {
      return Promise.reject(err);
    }
    if (value instanceof LoadResult) {
      return Promise.reject(
        new BadValueError(
          'put takes the value itself: withPolicy is for what a loader returns (a written row carries no tags)',
          { table: this.name, id },
        ),
      );
    }
    // Serialised even when received: a value nested beyond the stack is refused either way.
    const serialised = toJson(value);
    const json = serialised === undefined ? undefined : (received ?? serialised);
    if (json === undefined) {
      return Promise.reject(
        new BadValueError('value cannot be serialised as JSON', { table: this.name, id }),
      );
    }
    // A read after this write must not coalesce onto a miss posted before it.
    this.#open = undefined;
    return new Promise<{ version: number }>((resolve, reject) => {
      this.#owner.post({ kind: 'put', id, value, json, waiter: { resolve, reject } });
    }).then(({ version }) => ({ version, etag: entityTag(json) }));
  }

  /**
   * Deletes the item from L2 (a tombstone; the lease is cancelled) and from
   * this process's L1; other instances drop it on the coherence message. A
   * flight already running for the id is detached: it writes nothing.
   *
   * `soft: true` keeps the value in L2, stale from now (a soft purge of one
   * row): the next read on any instance answers it stale while one refresh
   * per fleet runs. The lease is cancelled alike, so a load that read the row
   * before this call never stores its value as fresh after it.
   *
   * @throws (rejects) `ECC_BAD_ID`, `ECC_VALKEY_UNAVAILABLE`, `ECC_CLOSED`.
   */
  invalidate(id: string, options?: { soft?: boolean }): Promise<void> {
    try {
      assertId(this.name, id, this.policy.idPattern, this.#ctx.checkId);
      this.#assertOpen(id);
    } catch (err) {
      return Promise.reject(err);
    }
    this.#open = undefined;
    return new Promise((resolve, reject) => {
      this.#owner.post({
        kind: 'invalidate',
        id,
        ...(options?.soft === true ? { soft: true } : {}),
        waiter: { resolve, reject },
      });
    });
  }

  /**
   * Purges rows by tag (`{ tags: [...] }`: every row carrying one of them) or
   * the whole table (`{ all: true }`), fleet-wide. Hard (the default): once this
   * resolves, this instance never serves a purged row, other instances stop
   * within the coherence bound (their event), and the next read of each loads
   * it (one source read per row per fleet). `soft: true`: purged rows are served
   * stale while one refresh per row per fleet runs, and kept if it fails
   * (stale-if-error). A load that started before the purge never stores its
   * value as current after it: a row is purged when it was read from the
   * source at or before the purge's epoch (docs/freshness.md#purge).
   *
   * @returns the purge's epoch (µs on Valkey's clock).
   * @throws (rejects) {@link BadPurgeError} `ECC_BAD_PURGE` (neither or both of
   *   `tags` and `all: true`, 0 or more than 256 tags, a tag beyond the bounds),
   *   `ECC_VALKEY_UNAVAILABLE` (nothing purged when not sent), `ECC_CLOSED`.
   */
  purge(input: PurgeInput): Promise<PurgeResult> {
    let tags: string[] | undefined;
    const soft = (input as { soft?: unknown })?.soft;
    try {
      const { all } = input ?? {};
      if ((all === true) === (input?.tags !== undefined) || (all !== undefined && all !== true)) {
        throw new BadPurgeError('give either tags or all: true', { table: this.name });
      }
      if (soft !== undefined && typeof soft !== 'boolean') {
        throw new BadPurgeError('soft must be true or false', { table: this.name });
      }
      tags = all === true ? undefined : purgeTags(input.tags, this.name);
      if (this.#closed) throw new ClosedError('the store is shutting down', { table: this.name });
    } catch (err) {
      return Promise.reject(err);
    }
    // A read after this purge must not coalesce onto a miss posted before it.
    this.#open = undefined;
    const scope = { soft: soft === true, ...(tags === undefined ? {} : { tags }) };
    return new Promise((resolve, reject) => {
      this.#owner.post({ kind: 'purge', scope, waiter: { resolve, reject } });
    });
  }

  /** EchoStore's counters — hits, misses, loads, l2_hits, coalesced — and L1, flight and mailbox sizes. */
  stats(): TableStats {
    const c = this.#ctx.counters;
    return {
      hits: c.hits,
      misses: c.misses,
      loads: c.loads,
      fills: c.loads,
      l2_hits: c.l2_hits,
      coalesced: c.coalesced,
      l1_entries: this.#l1.size,
      l1_bytes: this.#l1.bytes,
      flights: this.#owner.flights,
      mailbox_depth: this.#owner.mailboxDepth,
      loads_active: this.#ctx.admission.active,
      loads_queued: this.#ctx.admission.queued,
      load_limit: this.#ctx.admission.limit,
      queue_delay_ms: Math.round(this.#ctx.admission.queueDelayMs),
    };
  }

  /**
   * What this process's L1 holds for `id`, without touching its recency
   * (diagnostics: `GET /v1/admin/tables/:table/items/:id`), or `undefined`.
   */
  inspectL1(id: string): L1Inspection | undefined {
    const row = this.#l1.peek(id);
    const now = this.#ctx.now();
    // Past its L1 lifetime a read no longer sees the row (it drops it and asks L2): neither does this.
    if (row === undefined || now >= row.expiresAt) return undefined;
    return {
      version: row.version,
      negative: row.negative,
      softTtlMs: Math.round(row.softExpiresAt - now),
      hardTtlMs: Math.round(row.hardExpiresAt - now),
      l1TtlMs: Math.max(0, Math.round(row.expiresAt - now)),
      deltaMs: row.deltaMs,
      bytes: row.bytes,
      tags: [...(row.tags ?? [])],
      purged: this.purgeOf(row.born, row.tags),
    };
  }

  /**
   * Whether a purge this instance knows of covers a row read from the source at `born` (µs on
   * Valkey's clock) with `tags` (diagnostics: `inspect`).
   */
  purgeOf(born: number, tags: readonly string[] | undefined): PurgeKind | null {
    const state = this.#epochs.judge(born, tags);
    return state === HARD_PURGED ? 'hard' : state === NOT_PURGED ? null : 'soft';
  }

  /** Remaining L1 lifetime of a row in milliseconds, 0 when absent (diagnostics and tests). */
  l1TtlMs(id: string): number {
    return this.#l1.remainingTtlMs(id, this.#ctx.now());
  }

  /** @internal Stops taking work; waits up to `graceMs` for flights and writes to settle. */
  close(graceMs: number): Promise<void> {
    this.#closed = true;
    return this.#owner.close(graceMs);
  }

  /** Asks the owner for a background refresh, unless one runs or the id is backing off. */
  #refresh(id: string, reason: RefreshReason, now: number): void {
    if (this.#owner.wantsRefresh(id, now)) this.#owner.post({ kind: 'refresh', id, reason });
  }

  /** A read's failure as a coded error (anything else is a bug: `ECC_INTERNAL`). */
  #asError(err: unknown, id: string): EchoStoreError {
    if (err instanceof EchoStoreError) return err;
    this.#ctx.log.error({ err }, 'batch read failed');
    return new InternalError('internal error in a batch read', {
      table: this.name,
      id,
      cause: err,
    });
  }

  #assertOpen(id: string): void {
    if (this.#closed) throw new ClosedError('the store is shutting down', { table: this.name, id });
  }
}
