import { describe, expect, it, vi } from 'vitest';
import { Flight, type Waiter } from '../../src/actor/flight.js';
import { Mailbox } from '../../src/actor/mailbox.js';
import { type Message, waitersOf } from '../../src/actor/messages.js';

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

  it('depth counts only the messages not yet handled, also while it drains', async () => {
    const depths: number[] = [];
    const box: Mailbox<string> = new Mailbox<string>(
      () => depths.push(box.depth),
      vi.fn(),
      vi.fn(),
    );
    for (const m of ['a', 'b', 'c']) box.post(m);
    await tick();
    expect(depths).toEqual([2, 1, 0]);
  });
});

describe('message vocabulary', () => {
  it('names the callers each message carries, so a failing handler can answer them', () => {
    const waiter = { resolve: vi.fn(), reject: vi.fn() };
    const flight = new Flight('k', waiter as Waiter);
    const envelope = {
      value: 1,
      json: '1',
      version: 1,
      softExpiresAt: 1,
      hardExpiresAt: 1,
      deltaMs: 0,
      negative: false,
    };
    const carrying: Message[] = [
      { kind: 'miss', id: 'k', waiter },
      { kind: 'put', id: 'k', value: 1, json: '1', waiter },
      { kind: 'written', id: 'k', envelope, waiter },
      { kind: 'invalidate', id: 'k', waiter },
      { kind: 'invalidated', id: 'k', waiter },
    ];
    for (const m of carrying) expect(waitersOf(m), m.kind).toEqual([waiter]);
    expect(
      waitersOf({ kind: 'landed', flight, outcome: { kind: 'skipped', retryAfterMs: 0 } }),
    ).toBe(flight.waiters);
    expect(waitersOf({ kind: 'serveStale', flight, envelope })).toBe(flight.waiters);
    for (const m of [
      { kind: 'refresh', id: 'k', reason: 'stale' },
      { kind: 'event', event: { k: 'put', id: 'k', v: 1 } },
      { kind: 'flush' },
    ] as Message[]) {
      expect(waitersOf(m), m.kind).toEqual([]);
    }
  });
});
