/**
 * Whether V8's heap ceiling leaves room for the L1 rows. The service starts
 * with `--max-old-space-size=512 --max-semi-space-size=8` (`npm start`, the
 * Dockerfile): after each full GC V8 lets the old space grow to a multiple of
 * the live heap before the next, and that multiple grows with the ceiling (on
 * x64 about 1.1 at a 256 MiB ceiling, 4 at 2 GiB and above). A cache's evicted
 * rows die in the old space, so the multiple is what RSS pays beyond the live
 * heap: with these flags `npm run bench:memory` measured peak RSS growth
 * 1.9–2.1 × `l1.maxBytes`, against 3.4–4.3 × under V8's defaults
 * (docs/operations.md, memory). A ceiling too low for the configured L1s would
 * end in an out-of-memory crash, hence this check at start-up.
 */
import { getHeapStatistics } from 'node:v8';

/** Heap the service needs besides its L1 rows (code, sockets, flights in progress), bytes. */
export const HEAP_BASE_BYTES = 128 * 1024 * 1024;

/**
 * Heap the service may need with these L1s, bytes: twice their `maxBytes`
 * (the heap after GC measured at most 1.25 × under churn; the rest is room for
 * garbage between GCs) plus {@link HEAP_BASE_BYTES}.
 */
export function heapNeededBytes(l1MaxBytes: readonly number[]): number {
  return HEAP_BASE_BYTES + 2 * l1MaxBytes.reduce((sum, n) => sum + n, 0);
}

/**
 * The heap the service may need and V8's ceiling, bytes, and whether the
 * ceiling covers the need.
 *
 * @param l1MaxBytes each table's `l1.maxBytes`.
 * @param ceilingBytes V8's heap ceiling (default: this process's `heap_size_limit`).
 */
export function heapRoom(
  l1MaxBytes: readonly number[],
  ceilingBytes = getHeapStatistics().heap_size_limit,
): { neededBytes: number; ceilingBytes: number; enough: boolean } {
  const neededBytes = heapNeededBytes(l1MaxBytes);
  return { neededBytes, ceilingBytes, enough: ceilingBytes >= neededBytes };
}
