import { BadValueError, ClosedError, WaitTimeoutError } from '../errors.js';
import { toJson } from './envelope.js';
import { xfetchDue } from './freshness.js';
import { assertId } from './keys.js';
import type { L1 } from './l1.js';
import type { OwnerCounters, RefreshReason } from './messages.js';
import type { TableOwner } from './owner.js';
import type { TablePolicy } from './policy.js';
import { resultOf } from './result.js';
import type { ReadResult, TableStats, WriteResult } from './types.js';

/** The caller-side counters (EchoStore's `hits` and `misses`) plus the owner's. */
export interface TableCounters extends OwnerCounters {
  hits: number;
  misses: number;
}

/**
 * The facade callers use for one table (cache-aside with single-flight).
 *
 * A read runs in the caller: an L1 hit is answered here and never enters the
 * owner's mailbox; only a miss becomes a `fill` message.
 */
export class Table {
  /** The table's name (`[a-z0-9_-]{1,64}`). */
  readonly name: string;
  /** The resolved policy (defaults applied). */
  readonly policy: TablePolicy;
  readonly #l1: L1;
  readonly #owner: TableOwner;
  readonly #counters: TableCounters;
  #closed = false;

  /** @internal Built by `createStore`. */
  constructor(
    name: string,
    policy: TablePolicy,
    l1: L1,
    owner: TableOwner,
    counters: TableCounters,
  ) {
    this.name = name;
    this.policy = policy;
    this.#l1 = l1;
    this.#owner = owner;
    this.#counters = counters;
  }

  /**
   * Reads an item: L1, else the owner's flight (L2, else the loader).
   *
   * @param id 1–512 bytes of printable UTF-8 (and the table's `idPattern`).
   * @returns `{ found: true, value, json, source, coalesced, version, ttlMs }`,
   *   or `{ found: false, … }` when the source has no such item.
   * @throws (rejects) `ECC_BAD_ID`, `ECC_LOAD_FAILED`, `ECC_BAD_VALUE`,
   *   `ECC_LOAD_TIMEOUT`, `ECC_SHED`, `ECC_CLOSED` — see `errors.ts`; concurrent
   *   callers of one flight receive the same error object. `ECC_WAIT_TIMEOUT`
   *   when this caller waited `waitTimeoutMs` (each caller its own).
   */
  get(id: string): Promise<ReadResult> {
    try {
      assertId(this.name, id, this.policy.idPattern);
    } catch (err) {
      return Promise.reject(err);
    }
    const now = Date.now();
    const row = this.#l1.get(id, now);
    if (row !== undefined) {
      this.#counters.hits++;
      if (now < row.softExpiresAt) {
        this.#counters.reads[row.negative ? 'negative' : 'l1']++;
        if (xfetchDue(row, now, this.policy.earlyRefreshBeta)) this.#refresh(id, 'early', now);
      } else {
        // Between soft and hard TTL: answer stale now, one background refresh (stale-while-revalidate).
        this.#counters.reads.stale++;
        this.#refresh(id, 'stale', now);
      }
      return Promise.resolve(resultOf(row, 'l1', false, now));
    }
    this.#counters.misses++;
    // No caller waits longer than waitTimeoutMs, whatever its flight is doing;
    // the flight itself goes on and fills the cache for the next caller.
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new WaitTimeoutError(`no answer within waitTimeoutMs (${this.policy.waitTimeoutMs} ms)`, {
            table: this.name,
            id,
          }),
        );
      }, this.policy.waitTimeoutMs);
      const waiter = {
        resolve(result: ReadResult) {
          clearTimeout(timer);
          resolve(result);
        },
        reject(error: Error) {
          clearTimeout(timer);
          reject(error);
        },
      };
      this.#owner.post({ kind: 'fill', id, waiter });
    });
  }

  /**
   * Write-through: stores `value` in L2 (`SET … PX`), then in L1, with a new version.
   *
   * @param value any JSON-serialisable value.
   * @throws (rejects) `ECC_BAD_ID`, `ECC_BAD_VALUE` (not serialisable),
   *   `ECC_VALKEY_UNAVAILABLE` (Valkey refused or timed out: L1 is dropped for the id), `ECC_CLOSED`.
   */
  put(id: string, value: unknown): Promise<WriteResult> {
    try {
      assertId(this.name, id, this.policy.idPattern);
      this.#assertOpen(id);
    } catch (err) {
      return Promise.reject(err);
    }
    const json = toJson(value);
    if (json === undefined) {
      return Promise.reject(
        new BadValueError('value cannot be serialised as JSON', { table: this.name, id }),
      );
    }
    return new Promise((resolve, reject) => {
      this.#owner.post({ kind: 'put', id, value, json, waiter: { resolve, reject } });
    });
  }

  /**
   * Deletes the item from L2 (value and lease) and from this process's L1. A
   * flight already running for the id is detached: it writes nothing.
   *
   * @throws (rejects) `ECC_BAD_ID`, `ECC_VALKEY_UNAVAILABLE`, `ECC_CLOSED`.
   */
  invalidate(id: string): Promise<void> {
    try {
      assertId(this.name, id, this.policy.idPattern);
      this.#assertOpen(id);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise((resolve, reject) => {
      this.#owner.post({ kind: 'invalidate', id, waiter: { resolve, reject } });
    });
  }

  /** Asks the owner for a background refresh, unless one runs or the id is backing off. */
  #refresh(id: string, reason: RefreshReason, now: number): void {
    if (this.#owner.wantsRefresh(id, now)) this.#owner.post({ kind: 'refresh', id, reason });
  }

  /** EchoStore's counters — hits, misses, fills, l2_hits, coalesced — and L1, flight and mailbox sizes. */
  stats(): TableStats {
    const c = this.#counters;
    return {
      hits: c.hits,
      misses: c.misses,
      fills: c.fills,
      l2_hits: c.l2_hits,
      coalesced: c.coalesced,
      l1_entries: this.#l1.size,
      l1_bytes: this.#l1.bytes,
      flights: this.#owner.flights,
      mailbox_depth: this.#owner.mailboxDepth,
      loads_active: this.#owner.gate.active,
      loads_queued: this.#owner.gate.queued,
    };
  }

  /** Remaining L1 lifetime of a row in milliseconds, 0 when absent (diagnostics and tests). */
  l1TtlMs(id: string): number {
    return this.#l1.remainingTtlMs(id);
  }

  /** @internal Stops taking work; waits up to `graceMs` for flights and writes to settle. */
  close(graceMs: number): Promise<void> {
    this.#closed = true;
    return this.#owner.close(graceMs);
  }

  #assertOpen(id: string): void {
    if (this.#closed) throw new ClosedError('the store is shutting down', { table: this.name, id });
  }
}
