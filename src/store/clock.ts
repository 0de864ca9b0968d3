/**
 * The clock of the L1 hit path: `performance.now()` read at most once per
 * millisecond and once per 64 reads, since on a hit the clock read cost as
 * much as the rest of the hit. It lags the true clock by at most a
 * millisecond, or the event loop's lag while the loop is blocked (the timer
 * that expires the cached reading cannot run before the loop turns); at most
 * 64 reads see one reading. A reading is whole milliseconds (rounded down, so
 * it lags by up to one more): L1 rows keep whole-millisecond times, and a hit's
 * comparisons and its answer's `ttlMs` then stay small integers, which V8 keeps
 * unboxed. L1 lifetimes are jittered by seconds, so neither lag shows. Decisions
 * off the hit path (flights, fills, writes) use the precise clock.
 */

/** Reads sharing one clock reading at most. */
const MAX_USES = 64;

/** A new coarse monotonic clock, ms (see the file's comment). */
export function coarseClock(): () => number {
  let reading = 0;
  let uses = 0;
  let timer: NodeJS.Timeout | undefined;
  const expire = () => {
    uses = 0;
    timer = undefined;
  };
  return () => {
    if (uses > 0) {
      uses--;
      return reading;
    }
    reading = Math.floor(performance.now());
    uses = MAX_USES - 1;
    if (timer === undefined) {
      timer = setTimeout(expire, 1);
      timer.unref();
    }
    return reading;
  };
}
