/** What every source kind returns. */
import type { LoadFn } from '../store/types.js';

/**
 * A source of truth for one table: the loader the store calls on a miss, and
 * how to release what the source holds (a database handle, sockets).
 */
export interface Source {
  /** Reads one item; resolves `undefined` when the source has no such item. */
  load: LoadFn;
  /** Releases the source's resources. Idempotent; `load` must not be called after it. */
  close(): void;
}
