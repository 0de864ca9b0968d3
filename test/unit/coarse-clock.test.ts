/** The L1 hit path's clock (`clock.ts`): one reading serves at most 64 reads and one millisecond. */
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { coarseClock } from '../../src/store/clock.js';

describe('coarse clock', () => {
  it('serves one reading to at most 64 reads, then reads the clock again', () => {
    const now = coarseClock();
    const first = now();
    const readings = Array.from({ length: 63 }, () => now());
    expect(readings.every((r) => r === first)).toBe(true);
    while (performance.now() < first + 1) {
      // let the true clock reach the next whole millisecond, without a timer turn
    }
    expect(now()).toBeGreaterThan(first);
  });

  it('reads whole milliseconds, rounded down', () => {
    const now = coarseClock();
    const before = performance.now();
    const reading = now();
    expect(Number.isInteger(reading)).toBe(true);
    expect(reading).toBeGreaterThanOrEqual(Math.floor(before));
    expect(reading).toBeLessThanOrEqual(performance.now());
  });

  it('reads the clock again once its millisecond timer has run', () => {
    // Fake timers and a fake performance clock: the timer runs when the test says so.
    vi.useFakeTimers({ toFake: ['setTimeout', 'performance'] });
    onTestFinished(() => {
      vi.useRealTimers();
    });
    const now = coarseClock();
    const first = now();
    vi.advanceTimersByTime(5);
    expect(now()).toBe(first + 5);
  });
});
