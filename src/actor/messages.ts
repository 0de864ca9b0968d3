/**
 * A table owner's message vocabulary. Every change to a table's state
 * (flights, L1 after loads, writes) is one of these messages, handled one at
 * a time by `mailbox.ts`; async work reports back with one.
 */

import type { TableEvent } from '../l2/events.js';
import type { Envelope } from '../l2/format.js';
import type { PurgeAck, PurgeScope } from '../l2/scripts.js';
import type { PurgeResult, WriteResult } from '../store/types.js';

/** What the owner answers a `put` with; the table adds the entity tag. */
type Written = Pick<WriteResult, 'version'>;

import type { Flight, Outcome, Waiter } from './flight.js';

/** A caller waiting for a write (`put` or `invalidate`) to be acknowledged. */
export interface WriteWaiter<T> {
  resolve(result: T): void;
  reject(error: Error): void;
}

/**
 * Why a background refresh started: XFetch (`early`), a stale read (`stale`), a row loaded while
 * Valkey was unusable (`revalidate`), or a soft-purged row read (`purge`).
 */
export type RefreshReason = 'early' | 'stale' | 'revalidate' | 'purge';

/**
 * A caller missed L1. Callers of the same id that miss while it waits in the
 * mailbox coalesce onto it (`coalesced`: one shared read for all of them)
 * instead of posting their own, so a herd in one tick costs one message. Who
 * writes: the table creates it and adds callers while `open`; the owner sets
 * `open` to false when it handles it (from then on a miss posts a new message).
 */
export interface Miss {
  kind: 'miss';
  id: string;
  /** The caller that posted it. */
  waiter: Waiter;
  /** The callers that coalesced onto it, sharing one answer (`count` of them). */
  coalesced?: Waiter & { readonly count: number };
  /** Still in the mailbox: callers may coalesce onto it. */
  open?: boolean;
  /**
   * Read-your-writes: ignore L1 and any flight running now (either may predate a
   * commit the caller has seen); a new flight asks Valkey, which holds the
   * change stream's invalidations up to the position the caller waited for.
   */
  fresh?: boolean;
}

/** The messages a table owner handles, one at a time, in arrival order. */
export type Message =
  /** A caller missed L1 (and maybe more, coalesced before it was handled): coalesce them onto the id's flight, or launch one. */
  | Miss
  /** A flight finished (its one way back to the owner): answer its waiters, write L1. */
  | { kind: 'landed'; flight: Flight; outcome: Outcome }
  /** A flight holds a stale value: answer its waiters with it now, load on behind (stale-while-revalidate). */
  | { kind: 'serveStale'; flight: Flight; envelope: Envelope }
  /** A lease holder's load returned and its fill is sent: answer its waiters now, keep it once it lands. */
  | { kind: 'loaded'; flight: Flight; envelope: Envelope }
  /** A caller saw a stale row, or XFetch said refresh early: refresh in the background. */
  | { kind: 'refresh'; id: string; reason: RefreshReason }
  /** A caller writes through: send it to Valkey, park the id's messages until acknowledged. */
  | { kind: 'put'; id: string; value: unknown; json: string; waiter: WriteWaiter<Written> }
  /** Valkey acknowledged (or failed) a `put`: write L1, answer, replay what was parked. */
  | {
      kind: 'written';
      id: string;
      envelope: Envelope;
      error?: unknown;
      waiter: WriteWaiter<Written>;
    }
  /**
   * A caller deletes: tombstone in Valkey (`soft`: the value kept there, stale), drop L1, park
   * the id's messages until acknowledged.
   */
  | { kind: 'invalidate'; id: string; soft?: boolean; waiter: WriteWaiter<void> }
  /** Valkey acknowledged (or failed) an `invalidate`: answer, replay what was parked. */
  | { kind: 'invalidated'; id: string; error?: unknown; waiter: WriteWaiter<void> }
  /** A caller purges rows by tag or the whole table: the epochs in Valkey, then in memory. */
  | { kind: 'purge'; scope: PurgeScope; waiter: WriteWaiter<PurgeResult> }
  /** Valkey acknowledged (or failed) a `purge`: apply its epoch, answer. */
  | {
      kind: 'purged';
      scope: PurgeScope;
      ack?: PurgeAck;
      error?: unknown;
      waiter: WriteWaiter<PurgeResult>;
    }
  /** Another instance (or this one) wrote, filled, deleted or purged: coherence for L1 and flights. */
  | { kind: 'event'; event: TableEvent }
  /** The subscriber reconnected: events may have been missed, drop every L1 row. */
  | { kind: 'flush' };

/** The callers a message carries (answered with an error if its handler throws). */
export function waitersOf(m: Message): Array<{ reject(error: Error): void }> {
  switch (m.kind) {
    case 'miss':
      return m.coalesced === undefined ? [m.waiter] : [m.waiter, m.coalesced];
    case 'put':
    case 'written':
    case 'invalidate':
    case 'invalidated':
    case 'purge':
    case 'purged':
      return [m.waiter];
    case 'landed':
    case 'serveStale':
    case 'loaded':
      return m.flight.waiters;
    default:
      return [];
  }
}
