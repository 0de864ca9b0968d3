/** The messages a table owner handles, and the shapes they carry. */
import type { ReadCounts } from '../metrics.js';
import type { Envelope } from './envelope.js';
import type { TableEvent } from './events.js';
import type { Flight, Outcome, Waiter } from './flight.js';
import type { WriteResult } from './types.js';

/** A caller waiting for a write (`put` or `invalidate`) to be acknowledged. */
export interface WriteWaiter<T> {
  resolve(result: T): void;
  reject(error: Error): void;
}

/** The messages a table owner handles, one at a time, in arrival order. */
export type Message =
  | { kind: 'fill'; id: string; waiter: Waiter }
  | { kind: 'landed'; flight: Flight; outcome: Outcome }
  | { kind: 'put'; id: string; value: unknown; json: string; waiter: WriteWaiter<WriteResult> }
  | {
      kind: 'written';
      id: string;
      envelope: Envelope;
      error?: unknown;
      waiter: WriteWaiter<WriteResult>;
    }
  | { kind: 'invalidate'; id: string; waiter: WriteWaiter<void> }
  | { kind: 'invalidated'; id: string; error?: unknown; waiter: WriteWaiter<void> }
  /** A caller saw a stale row, or XFetch said refresh early: refresh in the background. */
  | { kind: 'refresh'; id: string; reason: RefreshReason }
  /** A flight found a stale value to serve while it loads (stale-while-revalidate). */
  | { kind: 'early'; flight: Flight; envelope: Envelope }
  /** Another instance (or this one) wrote, filled or deleted an id. */
  | { kind: 'event'; event: TableEvent }
  /** The subscriber reconnected: events may have been missed, drop every L1 row. */
  | { kind: 'flush' };

/** Why a background refresh started: XFetch (`early`) or a stale read (`stale`). */
export type RefreshReason = 'early' | 'stale';

/** The counters the owner bumps (the caller bumps `hits` and `misses`). */
export interface OwnerCounters {
  /** Answered reads by layer, mirrored into `echostore_reads_total` at scrape time. */
  reads: ReadCounts;
  fills: number;
  l2_hits: number;
  coalesced: number;
}
