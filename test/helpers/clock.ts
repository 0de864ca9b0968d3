/** An epoch-millisecond clock a test moves by hand (`createStore`'s `now` option). */
export interface ManualClock {
  /** The clock's time, epoch ms. */
  now(): number;
  /** Moves the clock forward by `ms`. */
  advance(ms: number): void;
}

/**
 * A clock that starts at the real time and moves only when told, so a test can
 * pass a soft or hard TTL without sleeping. Stores that share Valkey in one
 * test must share one clock: the expiries they write are read by each other.
 */
export function manualClock(start = Date.now()): ManualClock {
  let now = start;
  return {
    now: () => now,
    advance(ms) {
      now += ms;
    },
  };
}
