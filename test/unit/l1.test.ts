/**
 * L1's eviction and accounting on its own (`l1.ts`, over lru-cache): the least
 * recently used row goes first, a row counts its strings as V8 stores them,
 * the row bound holds without preallocation, a row's shared answer is counted
 * once it is made, and lifetimes end at the L1 TTL or the hard TTL, whichever
 * comes first.
 */
import { describe, expect, it } from 'vitest';
import type { Envelope } from '../../src/l2/format.js';
import { SHARED_ANSWER_BYTES } from '../../src/store/answers.js';
import { L1, ROW_OVERHEAD_BYTES, stringBytes } from '../../src/store/l1.js';

const env = (json: string, hardInMs = 60_000, now = 0): Envelope => ({
  value: undefined,
  json,
  version: 1,
  softExpiresAt: now + hardInMs,
  hardExpiresAt: now + hardInMs,
  deltaMs: 1,
  negative: false,
});
const l1 = (maxEntries: number, maxBytes = 1 << 20, ttlMs = 30_000) =>
  new L1({ maxEntries, maxBytes, ttlMs }, 0);

describe('L1', () => {
  it('holds at most maxEntries rows, and evicts the least recently used first', () => {
    const c = l1(3);
    for (const id of ['a', 'b', 'c']) c.set(id, env('1'), 0);
    expect(c.get('a', 1)).toBeDefined(); // a is now the most recently used
    c.set('d', env('1'), 2);
    expect(c.peek('b')).toBeUndefined();
    c.set('e', env('1'), 3);
    expect(c.peek('c')).toBeUndefined();
    expect(c.peek('a')).toBeDefined();
    expect(c.size).toBe(3);
  });

  it('a replaced or cleared row gives its bytes back', () => {
    const c = l1(10);
    c.set('k', env('"one"'), 0);
    c.set('k', env('"three"'), 0);
    expect(c.bytes).toBe(ROW_OVERHEAD_BYTES + stringBytes('"three"') + stringBytes('k'));
    c.clear();
    expect(c.bytes).toBe(0);
    expect(c.size).toBe(0);
  });

  it('counts a row as its overhead plus its strings as V8 stores them', () => {
    const c = l1(10);
    c.set('id', env('"ascii"'), 0);
    expect(c.bytes).toBe(ROW_OVERHEAD_BYTES + stringBytes('"ascii"') + stringBytes('id'));
    expect(stringBytes('abcdefgh')).toBe(24);
    expect(stringBytes('€€€€')).toBe(24);
    expect(stringBytes('€'.repeat(8))).toBe(32);
    c.delete('id');
    expect(c.bytes).toBe(0);
  });

  it('evicts by bytes until the new row fits, and never keeps a row over an eighth of maxBytes', () => {
    const row = ROW_OVERHEAD_BYTES + stringBytes('"x"') + stringBytes('k0');
    const c = l1(1_000, row * 8 + 10);
    for (let i = 0; i < 20; i++) expect(c.set(`k${i}`, env('"x"'), i)).toBe(true);
    expect(c.size).toBe(8);
    expect(c.bytes).toBe(row * 8);
    expect(c.set('big', env(JSON.stringify('y'.repeat(row * 2))), 30)).toBe(false);
  });

  it('counts a row’s shared answer from when it is made, and evicts by bytes for it', () => {
    const row = ROW_OVERHEAD_BYTES + stringBytes('"x"') + stringBytes('k0');
    // Full at 13 rows; a row and its answer stay within an eighth of maxBytes.
    const c = l1(1_000, row * 13);
    for (let i = 0; i < 13; i++) c.set(`k${i}`, env('"x"'), i);
    const hit = c.get('k1', 10);
    expect(hit?.answer).toBeUndefined();
    const answer = hit && c.share('k1', hit, () => 10);
    expect(answer).toBe(hit?.answer);
    expect(answer).toMatchObject({ found: true, layer: 'l1', json: '"x"' });
    // The row grew by its answer: the least recently used row left to make room.
    expect(c.peek('k0')).toBeUndefined();
    expect(c.peek('k1')).toBe(hit);
    expect(c.bytes).toBe(row * 12 + SHARED_ANSWER_BYTES);
    c.delete('k1');
    expect(c.bytes).toBe(row * 11);
  });

  it('a row leaves at its L1 TTL or its hard TTL, whichever comes first', () => {
    const c = l1(10, 1 << 20, 1_000);
    c.set('short-hard', env('1', 500), 0);
    c.set('long-hard', env('1', 60_000), 0);
    expect(c.remainingTtlMs('short-hard', 0)).toBe(500);
    expect(c.remainingTtlMs('long-hard', 0)).toBe(1_000);
    expect(c.get('short-hard', 499)).toBeDefined();
    expect(c.get('short-hard', 500)).toBeUndefined();
    expect(c.get('long-hard', 999)).toBeDefined();
    expect(c.get('long-hard', 1_000)).toBeUndefined();
    expect(c.set('gone', env('1', 10), 20)).toBe(false);
  });
});
