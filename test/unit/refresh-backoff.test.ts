import { describe, expect, it } from 'vitest';
import { RefreshBackoff } from '../../src/store/freshness.js';

const T0 = 1_000_000;

/** The pause after the latest failure: the first `now` at which `id` may be retried. */
function retryAt(b: RefreshBackoff, id: string, from: number): number {
  expect(b.mayRetry(id, from)).toBe(false);
  let lo = from;
  let hi = from + 120_000;
  expect(b.mayRetry(id, hi)).toBe(true);
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (b.mayRetry(id, mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

describe('refresh back-off (stale-if-error)', () => {
  it('an id that never failed may be retried at once', () => {
    expect(new RefreshBackoff().mayRetry('k', T0)).toBe(true);
  });

  it('backs off 1 s, 2 s, 4 s … up to 30 s after consecutive failures', () => {
    const b = new RefreshBackoff();
    const pauses: number[] = [];
    let now = T0;
    for (let i = 0; i < 8; i++) {
      b.failed('k', now);
      const at = retryAt(b, 'k', now);
      pauses.push(at - now);
      now = at;
    }
    expect(pauses).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
  });

  it('keeps one back-off per id', () => {
    const b = new RefreshBackoff();
    b.failed('a', T0);
    b.failed('a', T0 + 1_000);
    b.failed('b', T0 + 1_000);
    expect(retryAt(b, 'a', T0 + 1_000)).toBe(T0 + 3_000);
    expect(retryAt(b, 'b', T0 + 1_000)).toBe(T0 + 2_000);
    expect(b.mayRetry('c', T0)).toBe(true);
  });

  it('succeeded clears the back-off: the next failure pauses 1 s again', () => {
    const b = new RefreshBackoff();
    b.failed('k', T0);
    b.failed('k', T0 + 1_000);
    b.succeeded('k');
    expect(b.mayRetry('k', T0 + 1_000)).toBe(true);
    b.failed('k', T0 + 5_000);
    expect(retryAt(b, 'k', T0 + 5_000)).toBe(T0 + 6_000);
  });

  it('pause holds retries until the given time without counting a failure', () => {
    const b = new RefreshBackoff();
    b.pause('k', T0 + 700);
    expect(retryAt(b, 'k', T0)).toBe(T0 + 700);
    // No failure was counted: the first real failure still pauses 1 s.
    b.failed('k', T0 + 700);
    expect(retryAt(b, 'k', T0 + 700)).toBe(T0 + 1_700);
  });

  it('pause never shortens a longer back-off, and keeps its failure count', () => {
    const b = new RefreshBackoff();
    b.failed('k', T0);
    b.failed('k', T0 + 1_000); // until T0 + 3,000, two failures
    b.pause('k', T0 + 1_500);
    expect(retryAt(b, 'k', T0 + 1_000)).toBe(T0 + 3_000);
    b.pause('k', T0 + 5_000);
    expect(retryAt(b, 'k', T0 + 1_000)).toBe(T0 + 5_000);
    b.failed('k', T0 + 5_000); // the third failure: 4 s
    expect(retryAt(b, 'k', T0 + 5_000)).toBe(T0 + 9_000);
  });

  it('remembers at most maxIds ids, forgetting the least recently failed first', () => {
    const b = new RefreshBackoff(2);
    b.failed('a', T0);
    b.failed('b', T0);
    b.failed('c', T0);
    expect(b.mayRetry('a', T0)).toBe(true);
    expect(b.mayRetry('b', T0)).toBe(false);
    expect(b.mayRetry('c', T0)).toBe(false);
  });
});
