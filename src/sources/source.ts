/** What every source kind returns. */
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
  /** Releases the source's resources. Idempotent; `load` must not be called after it. */
  close(): void | Promise<void>;
}
