/** What every source kind returns. */
import type { ConfigError } from '../errors.js';
import type { LoadFn, LoadManyFn } from '../store/types.js';

/**
 * A source of truth for one table: the loader the store calls on a miss, and
 * how to release what the source holds (a database handle, a pool, sockets).
 */
export interface Source {
  /** Reads one item; resolves `undefined` when the source has no such item. */
  load: LoadFn;
  /** Reads many items in one call (one `WHERE id IN (…)`), when the kind can (`postgres`, `mysql`). */
  loadMany?: LoadManyFn;
  /**
   * Lists up to `limit` ids, most wanted first, for a start-up warm-up
   * (`warm.top`). Optional: only sources configured with a listing query have
   * it (`sqlite`, `postgres` or `mysql` with `idsQuery`).
   *
   * @throws (rejects) the source's own error when the listing fails; {@link ConfigError}
   *   `ECC_BAD_CONFIG` when a listed id is neither text nor an integer.
   */
  listIds?(limit: number): Promise<string[]>;
  /**
   * The source's own id rule, checked before anything touches Valkey or the
   * source (the `http` kind refuses dot-segments).
   *
   * @throws {BadIdError} `ECC_BAD_ID`.
   */
  checkId?(id: string): void;
  /**
   * How long this kind confirms a "not found" before it replaces a value
   * (the table's `confirmNotFoundMs` when the table does not set it): an
   * `http` origin can blip, so 5,000; a SQL query is authoritative, so absent (0).
   */
  confirmNotFoundMs?: number;
  /** Releases the source's resources. Idempotent; `load` must not be called after it. */
  close(): void | Promise<void>;
}
