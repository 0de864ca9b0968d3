/**
 * The per-table wait bound (`deadlines.ts`): one timer for every pending read,
 * each read failed at its own deadline, settled reads never touched again.
 * Runs on vitest's fake timers and an injected clock.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WaitDeadlines } from '../../src/protection/deadlines.js';
import type { ReadResult } from '../../src/store/types.js';

const answer = { found: false } as ReadResult;

describe('wait deadlines', () => {
  let now = 0;
  beforeEach(() => {
    vi.useFakeTimers();
    now = 0;
  });
  afterEach(() => vi.useRealTimers());
  const book = () =>
    new WaitDeadlines(
      100,
      (id) => new Error(`timeout ${id}`),
      () => now,
    );
  const advance = async (ms: number) => {
    now += ms;
    await vi.advanceTimersByTimeAsync(ms);
  };
  const outcome = (p: Promise<unknown>) =>
    p.then(
      () => 'answered',
      (e: Error) => e.message,
    );

  it('fails each read at its own deadline, with one timer for all of them', async () => {
    const b = book();
    const first = outcome(b.add('a').promise);
    await advance(40);
    const second = outcome(b.add('b').promise);
    expect(vi.getTimerCount()).toBe(1);
    await advance(60); // a's deadline: 100
    expect(await first).toBe('timeout a');
    expect(b.pending).toBe(1);
    await advance(39);
    expect(b.pending).toBe(1);
    await advance(1); // b's deadline: 140
    expect(await second).toBe('timeout b');
    expect(b.pending).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a settled read is never failed later, and no timer outlives the last pending read', async () => {
    const b = book();
    const a = b.add('a');
    const c = b.add('c');
    const [aOut, cOut] = [outcome(a.promise), outcome(c.promise)];
    a.resolve(answer);
    await advance(100);
    expect(await aOut).toBe('answered');
    expect(await cOut).toBe('timeout c');
    const d = b.add('d');
    d.resolve(answer);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('keeps order through compaction: many settled reads behind a pending one', async () => {
    const b = book();
    const head = outcome(b.add('head').promise);
    const rest = Array.from({ length: 5_000 }, (_, i) => b.add(`r${i}`));
    const outcomes = rest.map((r) => outcome(r.promise));
    for (const r of rest.slice(0, 4_990)) r.resolve(answer);
    await advance(100);
    expect(await head).toBe('timeout head');
    const all = await Promise.all(outcomes);
    expect(all.slice(0, 4_990).every((o) => o === 'answered')).toBe(true);
    expect(all.slice(4_990)).toEqual(Array.from({ length: 10 }, (_, i) => `timeout r${4_990 + i}`));
    expect(b.pending).toBe(0);
  });
});
