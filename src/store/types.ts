/** Types shared by the store's files and its users. */
import type { EchoStoreError } from '../errors.js';

/** What the loader is given besides the id. */
export interface LoadContext {
  /**
   * Aborted when the load times out (`loadTimeoutMs`) or the store closes. It
   * belongs to the flight, not to any one caller: a caller that gives up does
   * not cancel a load that others wait on.
   */
  signal: AbortSignal;
}

/**
 * Reads one item from the source of truth. The only code that touches the source.
 *
 * Resolve with the value (any JSON-serialisable value, `null` included), or
 * with `undefined` for "not found" (negative-cached for `negativeTtlMs`).
 * A rejection or synchronous throw fails every waiter of the flight with
 * `ECC_LOAD_FAILED` and is never cached.
 */
export type LoadFn = (id: string, ctx: LoadContext) => unknown | Promise<unknown>;
// A loader may also return `withPolicy(value, { ttlMs, staleMs, negative })` (see result.ts).

/**
 * Reads many items from the source of truth in one call (one `WHERE id IN (…)`),
 * for the misses of one table gathered within one tick or `batchWindowMs`
 * (at most `maxBatchSize` distinct ids, each asked once).
 *
 * Resolve with a `Map` from id to value, each value as {@link LoadFn} would
 * resolve it (`withPolicy` included). An id absent from the map, or mapped to
 * `undefined`, is "not found"; an id mapped to an `Error` fails alone
 * (`ECC_LOAD_FAILED`, or the error's own code if it is an EchoStore error). A
 * rejection fails every id of the call with `ECC_LOAD_FAILED`. `signal` is
 * aborted once every id of the call has timed out or been given up at close.
 */
export type LoadManyFn = (
  ids: readonly string[],
  ctx: LoadContext,
) => ReadonlyMap<string, unknown> | Promise<ReadonlyMap<string, unknown>>;

/** Which layer answered a read: in-process L1, Valkey L2, or the origin (the loader read the source of truth). */
export type ReadLayer = 'l1' | 'l2' | 'origin';

/** Common fields of every read answer. */
interface ReadBase {
  /** The layer that answered. */
  layer: ReadLayer;
  /** True when this caller attached to another caller's flight (single-flight). */
  coalesced: boolean;
  /** Mint-time version of the answer. */
  version: number;
  /** True when the answer is past its soft TTL (served stale while one caller refreshes it). */
  stale: boolean;
  /** Milliseconds until the answer goes stale (soft TTL); negative when it already is. */
  ttlMs: number;
  /**
   * For an answer from the origin: whether it was kept in the cache (false when
   * the fill lost its lease or was refused, or a write superseded the load).
   * Always false for L1 and L2 answers (nothing new was stored).
   */
  stored: boolean;
}

/** A found item. */
export interface FoundResult extends ReadBase {
  found: true;
  value: unknown;
  /** `value` as JSON text, ready to send. */
  json: string;
}

/** The source says the item does not exist (possibly a negative-cache hit). */
export interface NotFoundResult extends ReadBase {
  found: false;
}

/** The answer of `Table.get`. */
export type ReadResult = FoundResult | NotFoundResult;

/**
 * One id's answer in `Table.getMany`: its read, or the coded error that id
 * alone failed with (`ECC_BAD_ID`, `ECC_LOAD_FAILED`, `ECC_SHED`, …).
 */
export type BatchEntry =
  | { id: string; ok: true; result: ReadResult }
  | { id: string; ok: false; error: EchoStoreError };

/**
 * What `Table.purge` removes: the rows carrying any of `tags`, or (`all: true`) every row of the
 * table; `soft: true` serves them stale while one refresh per row per fleet runs (and keeps them
 * if that refresh fails: stale-if-error), else they are misses.
 */
export type PurgeInput =
  | { tags: readonly string[]; all?: undefined; soft?: boolean }
  | { all: true; tags?: undefined; soft?: boolean };

/** The answer of `Table.purge`. */
export interface PurgeResult {
  /** The purge's epoch, µs on Valkey's clock: rows read from the source at or before it are purged. */
  epoch: number;
}

/** The answer of `Table.put`. */
export interface WriteResult {
  /** The version minted for the write. */
  version: number;
  /** The strong entity tag of the stored JSON: what a GET of the item sends as `ETag` (see `etag.ts`). */
  etag: string;
}

/** EchoStore's counters for one table (monotonic since start), plus L1 size. */
export interface TableStats {
  /** Reads answered from L1 in the caller. */
  hits: number;
  /** Reads that went to the owner. */
  misses: number;
  /** Loader calls (source reads started by this process). */
  loads: number;
  /** @deprecated the same count as `loads`, under its old name (CHANGELOG.md, 0.2.0). */
  fills: number;
  /** Flights answered by Valkey (L2). */
  l2_hits: number;
  /** Callers that coalesced onto a running flight or an open miss message. */
  coalesced: number;
  /** Rows in L1 now. */
  l1_entries: number;
  /** Bytes in L1 now. */
  l1_bytes: number;
  /** Flights in progress now. */
  flights: number;
  /** Messages waiting in the owner's mailbox now. */
  mailbox_depth: number;
  /** Loader calls running now (at most `load_limit`). */
  loads_active: number;
  /** Loads waiting for a slot now. */
  loads_queued: number;
  /** Loader calls allowed at once now: the adaptive limit, between 1 and `maxConcurrentLoads` (`initialConcurrentLoads` at first). */
  load_limit: number;
  /** How long the oldest queued load has waited, ms (0 when none waits). */
  queue_delay_ms: number;
}
