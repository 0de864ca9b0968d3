/**
 * The in-process L1 on its own: hard-TTL checks on the caller's clock, the
 * jittered L1 TTL, the byte bound. `now` is passed in; lru-cache's own TTL
 * runs on real time.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { L1 } from '../../src/store/l1.js';
import { DEFAULT_POLICY, type L1Policy } from '../../src/store/policy.js';
import { fresh } from '../helpers/fake-table.js';

const NOW = 1_000_000;

function l1(policy: Partial<L1Policy> = {}, jitter = 0): L1 {
  return new L1({ ...DEFAULT_POLICY.l1, ...policy }, jitter);
}

describe('L1 (the in-process layer)', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('answers a row until its hard TTL on the caller’s clock, and not from then on', () => {
    const c = l1();
    c.set('k', fresh('v', NOW, 1_000), NOW);
    expect(c.get('k', NOW + 999)?.value).toBe('v');
    expect(c.get('k', NOW + 1_000)).toBeUndefined();
  });

  it('does not keep a row already at or past its hard TTL, and drops the row it would have replaced', () => {
    const c = l1();
    c.set('k', fresh('old', NOW, 10_000), NOW);
    expect(c.set('k', fresh('at-hard', NOW - 1_000, 1_000), NOW)).toBe(false);
    expect(c.peek('k')).toBeUndefined();
    expect(c.set('k', fresh('past-hard', NOW - 2_000, 1_000), NOW)).toBe(false);
    expect(c.size).toBe(0);
  });

  it('keeps a row for l1.ttlMs stretched by one jitter factor, never past its hard TTL', () => {
    vi.spyOn(Math, 'random').mockReturnValue(0.5);
    const c = l1({ ttlMs: 10_000 }, 0.2); // 10,000 ms × (1 + 0.5 × 0.2) = 11,000 ms
    c.set('long', fresh('v', NOW, 60_000), NOW);
    c.set('short', fresh('v', NOW, 3_000), NOW);
    // lru-cache counts on its own (real, cached) clock: a millisecond either way.
    expect(c.remainingTtlMs('long')).toBeGreaterThan(10_900);
    expect(c.remainingTtlMs('long')).toBeLessThanOrEqual(11_001);
    expect(c.remainingTtlMs('short')).toBeGreaterThan(2_900);
    expect(c.remainingTtlMs('short')).toBeLessThanOrEqual(3_001);
    expect(c.remainingTtlMs('absent')).toBe(0);
  });

  it('a row past its L1 TTL is no longer answered, but peek still sees it (coherence checks)', async () => {
    const c = l1({ ttlMs: 1 });
    c.set('k', fresh('v', NOW, 60_000), NOW);
    await vi.waitFor(() => expect(c.remainingTtlMs('k')).toBe(0));
    expect(c.peek('k')?.value).toBe('v');
    expect(c.get('k', NOW)).toBeUndefined();
  });

  it('counts UTF-8 bytes of the JSON and the key, and does not keep a row over an eighth of maxBytes', () => {
    const c = l1({ maxBytes: 8_000 });
    const small = { ...fresh('x', NOW), json: `"${'é'.repeat(100)}"` }; // 202 bytes
    expect(c.set('ké', small, NOW)).toBe(true);
    expect(c.bytes).toBe(202 + 3 + 64);
    const big = { ...fresh('x', NOW), json: `"${'a'.repeat(1_000)}"` };
    expect(c.set('big', big, NOW)).toBe(false);
    expect(c.peek('big')).toBeUndefined();
    expect(c.size).toBe(1);
  });

  it('delete drops one row; clear drops every row', () => {
    const c = l1();
    for (const id of ['a', 'b', 'c']) c.set(id, fresh(id, NOW), NOW);
    c.delete('a');
    expect([c.peek('a'), c.size]).toEqual([undefined, 2]);
    c.clear();
    expect([c.size, c.bytes]).toEqual([0, 0]);
  });
});
