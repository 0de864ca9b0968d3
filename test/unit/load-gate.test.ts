import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ShedError } from '../../src/errors.js';
import { LoadGate } from '../../src/store/gate.js';

/** What became of an `acquire`: 'granted', 'shed', or still 'waiting'. */
function track(p: Promise<void>): () => 'granted' | 'shed' | 'waiting' {
  let state: 'granted' | 'shed' | 'waiting' = 'waiting';
  p.then(
    () => {
      state = 'granted';
    },
    (err: unknown) => {
      if (!(err instanceof ShedError)) throw err;
      state = 'shed';
    },
  );
  return () => state;
}

const shed = () => new ShedError('shed', { table: 't' });

describe('load gate (maxConcurrentLoads, maxQueuedLoads)', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('grants up to maxConcurrentLoads slots at once; the next waits in the queue', async () => {
    const gate = new LoadGate(2, 5);
    const a = track(gate.acquire(1_000, shed));
    const b = track(gate.acquire(1_000, shed));
    const c = track(gate.acquire(1_000, shed));
    await vi.advanceTimersByTimeAsync(0);
    expect([a(), b(), c()]).toEqual(['granted', 'granted', 'waiting']);
    expect(gate.active).toBe(2);
    expect(gate.queued).toBe(1);
  });

  it('hands released slots to queued loads first in, first out', async () => {
    const gate = new LoadGate(1, 5);
    await gate.acquire(1_000, shed);
    const order: string[] = [];
    const queued = ['a', 'b', 'c'].map((name) =>
      gate.acquire(1_000, shed).then(() => order.push(name)),
    );
    for (let i = 0; i < 3; i++) {
      gate.release();
      await vi.advanceTimersByTimeAsync(0);
    }
    await Promise.all(queued);
    expect(order).toEqual(['a', 'b', 'c']);
  });

  it('release hands the slot on: the count of running loads stays at the cap', async () => {
    const gate = new LoadGate(1, 5);
    await gate.acquire(1_000, shed);
    const next = track(gate.acquire(1_000, shed));
    gate.release();
    await vi.advanceTimersByTimeAsync(0);
    expect(next()).toBe('granted');
    expect(gate.active).toBe(1);
    expect(gate.queued).toBe(0);
    // Its wait timer was cleared: the granted load is not shed later.
    await vi.advanceTimersByTimeAsync(5_000);
    expect(next()).toBe('granted');
    gate.release();
    expect(gate.active).toBe(0);
  });

  it('sheds at once when the queue is full', async () => {
    const gate = new LoadGate(1, 2);
    await gate.acquire(1_000, shed);
    const q1 = track(gate.acquire(1_000, shed));
    const q2 = track(gate.acquire(1_000, shed));
    const over = track(gate.acquire(1_000, shed));
    await vi.advanceTimersByTimeAsync(0);
    expect([q1(), q2(), over()]).toEqual(['waiting', 'waiting', 'shed']);
    expect(gate.queued).toBe(2);
  });

  it('sheds at once a load that may not wait at all (waitMs <= 0) when no slot is free', async () => {
    const gate = new LoadGate(1, 5);
    const free = track(gate.acquire(0, shed));
    const noWait = track(gate.acquire(0, shed));
    await vi.advanceTimersByTimeAsync(0);
    expect(free()).toBe('granted');
    expect(noWait()).toBe('shed');
    expect(gate.queued).toBe(0);
  });

  it('sheds a queued load that waited waitMs, and forgets it', async () => {
    const gate = new LoadGate(1, 5);
    await gate.acquire(1_000, shed);
    const queued = track(gate.acquire(300, shed));
    await vi.advanceTimersByTimeAsync(299);
    expect(queued()).toBe('waiting');
    await vi.advanceTimersByTimeAsync(1);
    expect(queued()).toBe('shed');
    expect(gate.queued).toBe(0);
    // The shed load never got a slot: the release frees it for the next caller.
    gate.release();
    expect(gate.active).toBe(0);
    await gate.acquire(1_000, shed);
    expect(gate.active).toBe(1);
  });

  it('calls shed() for its error, once per shed load', async () => {
    const gate = new LoadGate(1, 0);
    await gate.acquire(1_000, shed);
    const made = vi.fn(shed);
    await expect(gate.acquire(1_000, made)).rejects.toBeInstanceOf(ShedError);
    expect(made).toHaveBeenCalledTimes(1);
  });
});
