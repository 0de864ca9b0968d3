/**
 * XFetch (Vattani, Chierichetti, Lowenstein, "Optimal Probabilistic Cache
 * Stampede Prevention", VLDB 2015): a read at `now` refreshes early when
 * `now − deltaMs · beta · ln(random) ≥ softExpiresAt`. The random is injected,
 * so each case sits on a chosen side of that inequality.
 */
import { describe, expect, it } from 'vitest';
import type { Envelope } from '../../src/l2/format.js';
import { xfetchDue } from '../../src/store/freshness.js';

const NOW = 1_000_000;

/** A row going stale `leftMs` after NOW, whose load took `deltaMs`. */
function row(leftMs: number, deltaMs: number, negative = false): Envelope {
  return {
    value: negative ? null : { n: 1 },
    json: negative ? 'null' : '{"n":1}',
    version: 1,
    softExpiresAt: NOW + leftMs,
    hardExpiresAt: NOW + leftMs + 60_000,
    deltaMs,
    negative,
  };
}

/** ln(random) = -Infinity: the strongest possible pull toward an early refresh. */
const zero = () => 0;

describe('XFetch early refresh', () => {
  it('with beta 0 never refreshes early, not even at the soft expiry', () => {
    expect(xfetchDue(row(0, 100), NOW, 1, zero)).toBe(true);
    expect(xfetchDue(row(0, 100), NOW, 0, zero)).toBe(false);
    expect(xfetchDue(row(1, 100), NOW, 0, zero)).toBe(false);
  });

  it('never refreshes a negative row early', () => {
    expect(xfetchDue(row(1_000, 100), NOW, 1, zero)).toBe(true);
    expect(xfetchDue(row(1_000, 100, true), NOW, 1, zero)).toBe(false);
  });

  it('never refreshes early a row whose load took 0 ms (nothing to win)', () => {
    expect(xfetchDue(row(1_000, 1), NOW, 1, zero)).toBe(true);
    expect(xfetchDue(row(1_000, 0), NOW, 1, zero)).toBe(false);
  });

  it('refreshes exactly when now − deltaMs·beta·ln(random) reaches the soft expiry', () => {
    // 1,000 ms left, deltaMs 500, beta 2: due iff −ln(random) ≥ 1, i.e. random ≤ 1/e.
    const r = row(1_000, 500);
    expect(xfetchDue(r, NOW, 2, () => Math.exp(-1))).toBe(true);
    expect(xfetchDue(r, NOW, 2, () => Math.exp(-1) * 0.999)).toBe(true);
    expect(xfetchDue(r, NOW, 2, () => Math.exp(-1) * 1.001)).toBe(false);
    expect(xfetchDue(r, NOW, 2, () => 0.9)).toBe(false);
  });

  it('is likelier the slower the load and the larger beta (same random, same time left)', () => {
    const random = () => Math.exp(-2); // −ln = 2
    // 1,000 ms left: due iff deltaMs · beta · 2 ≥ 1,000.
    expect(xfetchDue(row(1_000, 400), NOW, 1, random)).toBe(false);
    expect(xfetchDue(row(1_000, 500), NOW, 1, random)).toBe(true);
    expect(xfetchDue(row(1_000, 250), NOW, 1.9, random)).toBe(false);
    expect(xfetchDue(row(1_000, 250), NOW, 2, random)).toBe(true);
  });

  it('is likelier the closer the soft expiry', () => {
    const random = () => Math.exp(-1);
    expect(xfetchDue(row(101, 100), NOW, 1, random)).toBe(false);
    expect(xfetchDue(row(100, 100), NOW, 1, random)).toBe(true);
    expect(xfetchDue(row(100, 100), NOW - 1, 1, random)).toBe(false);
  });

  it('with random 1 (ln 1 = 0) refreshes only once the soft expiry is reached', () => {
    const one = () => 1;
    expect(xfetchDue(row(1, 10_000), NOW, 100, one)).toBe(false);
    expect(xfetchDue(row(0, 10_000), NOW, 100, one)).toBe(true);
  });
});
