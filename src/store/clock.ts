/**
 * The clock of the L1 hit path: `performance.now()` read at most once per
 * millisecond and once per 64 reads, since on a hit the clock read cost as
 * much as the rest of the hit. It lags the true clock by at most a
 * millisecond, or the event loop's lag while the loop is blocked (the timer
 * that expires the cached reading cannot run before the loop turns); at most
 * 64 reads see one reading. L1 lifetimes are jittered by seconds, so neither
 * shows. Decisions off the hit path (flights, fills, writes) use the precise clock.
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
    reading = performance.now();
    uses = MAX_USES - 1;
    if (timer === undefined) {
      timer = setTimeout(expire, 1);
      timer.unref();
    }
    return reading;
  };
}
