import { describe, expect, it, vi } from 'vitest';
import { Mailbox } from '../../src/store/messages.js';

/** Lets queued microtasks run. */
const tick = () => new Promise<void>((r) => setImmediate(r));

describe('mailbox (the owner handles one message at a time)', () => {
  it('handles messages one at a time, in arrival order', async () => {
    const seen: string[] = [];
    const box = new Mailbox<string>((m) => seen.push(m), vi.fn(), vi.fn());
    for (const m of ['a', 'b', 'c']) box.post(m);
    await tick();
    expect(seen).toEqual(['a', 'b', 'c']);
  });

  it('runs a handler only after the poster has returned, never inside it', async () => {
    const seen: string[] = [];
    const box = new Mailbox<string>((m) => seen.push(m), vi.fn(), vi.fn());
    box.post('a');
    expect(seen).toEqual([]);
    expect(box.depth).toBe(1);
    await Promise.resolve();
    expect(seen).toEqual(['a']);
    expect(box.depth).toBe(0);
  });

  it('is never re-entrant: a message posted by a handler runs after that handler returns', async () => {
    const trace: string[] = [];
    let running = 0;
    let overlapped = false;
    const box: Mailbox<string> = new Mailbox<string>(
      (m) => {
        running++;
        if (running > 1) overlapped = true;
        trace.push(`${m}:start`);
        if (m === 'a') {
          box.post('from-a');
          box.post('from-a-2');
        }
        trace.push(`${m}:end`);
        running--;
      },
      vi.fn(),
      vi.fn(),
    );
    box.post('a');
    box.post('b');
    await tick();
    expect(overlapped).toBe(false);
    expect(trace).toEqual([
      'a:start',
      'a:end',
      'b:start',
      'b:end',
      'from-a:start',
      'from-a:end',
      'from-a-2:start',
      'from-a-2:end',
    ]);
  });

  it('a handler that throws is reported to failed with its message and error, and the queue drains on', async () => {
    const seen: string[] = [];
    const boom = new Error('bug');
    const failed = vi.fn();
    const box = new Mailbox<string>(
      (m) => {
        if (m === 'bad') throw boom;
        seen.push(m);
      },
      failed,
      vi.fn(),
    );
    for (const m of ['a', 'bad', 'b']) box.post(m);
    await tick();
    expect(failed).toHaveBeenCalledTimes(1);
    expect(failed).toHaveBeenCalledWith('bad', boom);
    expect(seen).toEqual(['a', 'b']);
    // The mailbox still works afterwards.
    box.post('c');
    await tick();
    expect(seen).toEqual(['a', 'b', 'c']);
  });

  it('calls drained once each time the queue runs empty, after the last message', async () => {
    const trace: string[] = [];
    const box: Mailbox<string> = new Mailbox<string>(
      (m) => trace.push(m),
      vi.fn(),
      () => trace.push(`drained(depth ${box.depth})`),
    );
    box.post('a');
    box.post('b');
    await tick();
    expect(trace).toEqual(['a', 'b', 'drained(depth 0)']);
    box.post('c');
    await tick();
    expect(trace).toEqual(['a', 'b', 'drained(depth 0)', 'c', 'drained(depth 0)']);
  });

  it('calls drained even when the last message threw', async () => {
    const drained = vi.fn();
    const box = new Mailbox<string>(
      () => {
        throw new Error('bug');
      },
      vi.fn(),
      drained,
    );
    box.post('a');
    await tick();
    expect(drained).toHaveBeenCalledTimes(1);
  });
});
