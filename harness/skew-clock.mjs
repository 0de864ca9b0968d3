/**
 * A preload (`node --import harness/skew-clock.mjs`) that moves this process's
 * wall clock by `SKEW_MS` milliseconds (e.g. 600000: ten minutes ahead), as an
 * NTP failure would: `Date.now()` and `new Date()` are off; the monotonic
 * clock (`performance.now()`) is not. For tests and drills of "one clock for
 * the fleet". Plain JavaScript: node loads it before the built service, with
 * no build step of its own.
 */
const skewMs = Number(process.env.SKEW_MS ?? 0);
if (!Number.isFinite(skewMs))
  throw new Error(`SKEW_MS must be a number of milliseconds (got ${process.env.SKEW_MS})`);

const RealDate = Date;

class SkewedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(RealDate.now() + skewMs);
    else super(...args);
  }

  static now() {
    return RealDate.now() + skewMs;
  }
}

globalThis.Date = SkewedDate;
