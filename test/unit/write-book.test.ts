import { describe, expect, it } from 'vitest';
import type { Message } from '../../src/actor/messages.js';
import { Writes } from '../../src/actor/writes.js';
import type { EchoStoreError } from '../../src/errors.js';
import type { Envelope } from '../../src/l2/format.js';
import type { WriteAck, WriteKind } from '../../src/l2/scripts.js';
import type { WriteResult } from '../../src/store/types.js';
import { BreakerOpenError } from '../../src/valkey/breaker.js';
import { fakeContext, fresh, settle } from '../helpers/fake-table.js';
import { deferred } from '../helpers/store.js';

/** One `l2.write` the test answers by hand. */
interface SentWrite {
  id: string;
  envelope: Envelope;
  pxMs: number;
  kind: WriteKind;
  ack(version: number, valkeyNowMs?: number): void;
  fail(error: unknown): void;
}

/**
 * A write book over a fake `l2.write`: `sent` lists the writes sent to
 * "Valkey", `posted` the acknowledgements posted back to the owner, `replayed`
 * the parked messages handed back after an acknowledgement.
 */
function book() {
  const sent: SentWrite[] = [];
  const l2 = {
    write(
      id: string,
      envelope: Envelope,
      _now: number,
      pxMs: number,
      kind: WriteKind,
    ): Promise<WriteAck> {
      const answer = deferred<WriteAck>();
      sent.push({
        id,
        envelope,
        pxMs,
        kind,
        ack: (version, valkeyNowMs = Math.floor(version / 1000)) =>
          answer.resolve({ version, valkeyNowMs }),
        fail: answer.reject,
      });
      return answer.promise;
    },
  };
  const fake = fakeContext(
    { ttlMs: 10_000, staleMs: 5_000, jitter: 0, leaseMs: 3_000, loadTimeoutMs: 1_000 },
    l2,
  );
  const posted: Message[] = [];
  const replayed: Message[] = [];
  const writes = new Writes(
    fake.ctx,
    fake.l1,
    (m) => posted.push(m),
    (m) => replayed.push(m),
  );
  /** Waits for the acknowledgement of the latest write and hands it to the book, as the owner does. */
  const deliver = async (): Promise<void> => {
    await settle();
    const m = posted.shift();
    if (m === undefined) throw new Error('no acknowledgement was posted');
    if (m.kind === 'written') writes.written(m);
    else if (m.kind === 'invalidated') writes.invalidated(m);
    else throw new Error(`unexpected ${m.kind}`);
  };
  return { ...fake, writes, sent, posted, replayed, deliver };
}

/** A waiter whose outcome the test can read. */
function waiter<T>() {
  const d = deferred<T>();
  return { waiter: { resolve: d.resolve, reject: d.reject }, promise: d.promise };
}

function put(id: string, value: unknown) {
  const w = waiter<WriteResult>();
  const m = { kind: 'put', id, value, json: JSON.stringify(value), waiter: w.waiter } as const;
  return { m, answer: w.promise };
}

async function rejection(p: Promise<unknown>): Promise<EchoStoreError> {
  return p.then(
    () => {
      throw new Error('expected a rejection');
    },
    (err: EchoStoreError) => err,
  );
}

describe('write book (put → written, invalidate → invalidated)', () => {
  it('parks the messages of an id behind its write and replays them in order after the acknowledgement', async () => {
    const b = book();
    const { m, answer } = put('k', { v: 1 });
    b.writes.put(m);
    expect(b.writes.has('k')).toBe(true);
    const parked: Message[] = [
      { kind: 'refresh', id: 'k', reason: 'stale' },
      { kind: 'invalidate', id: 'k', waiter: waiter<void>().waiter },
      { kind: 'refresh', id: 'k', reason: 'early' },
    ];
    for (const p of parked) expect(b.writes.park('k', p)).toBe(true);
    // Another id has no write in flight: nothing to park behind.
    expect(b.writes.park('other', parked[0] as Message)).toBe(false);

    b.sent[0]?.ack(42_000);
    await b.deliver();
    expect(b.replayed).toEqual(parked);
    expect(b.writes.has('k')).toBe(false);
    expect(await answer).toEqual({ version: 42_000 });
    // The acknowledged write is this instance's L1 row, at the version Valkey gave it.
    expect(b.l1.get('k', b.now())).toMatchObject({ json: '{"v":1}', version: 42_000 });
  });

  it('replays nothing before the acknowledgement', async () => {
    const b = book();
    b.writes.put(put('k', 1).m);
    b.writes.park('k', { kind: 'refresh', id: 'k', reason: 'stale' });
    await settle();
    expect(b.posted).toEqual([]);
    expect(b.replayed).toEqual([]);
  });

  it('sends a PUT with the table TTLs: PX is the hard TTL from now', () => {
    const b = book();
    b.writes.put(put('k', { v: 1 }).m);
    const w = b.sent[0] as SentWrite;
    expect(w.kind).toBe('put');
    expect(w.envelope).toMatchObject({ value: { v: 1 }, json: '{"v":1}', negative: false });
    expect(w.envelope.softExpiresAt).toBe(b.now() + 10_000);
    expect(w.envelope.hardExpiresAt).toBe(b.now() + 15_000);
    expect(w.pxMs).toBe(15_000);
  });

  it('an acknowledgement overtaken by a newer write of the id (its event came first) does not go into L1', async () => {
    const b = book();
    b.l1.set('k', fresh({ v: 'old' }, b.now(), 60_000, 10), b.now());
    const { m, answer } = put('k', { v: 'mine' });
    b.writes.put(m);
    b.writes.noteEvent('k', 50_000);
    b.sent[0]?.ack(40_000);
    await b.deliver();
    expect(await answer).toEqual({ version: 40_000 });
    expect(b.l1.peek('k')).toBeUndefined();
  });

  it('a newer event is not forgotten when an older one follows it', async () => {
    const b = book();
    b.writes.put(put('k', { v: 'mine' }).m);
    b.writes.noteEvent('k', 50_000);
    b.writes.noteEvent('k', 30_000);
    b.sent[0]?.ack(40_000);
    await b.deliver();
    expect(b.l1.peek('k')).toBeUndefined();
  });

  it("this instance's own write, announced before its acknowledgement, goes into L1", async () => {
    const b = book();
    b.writes.put(put('k', { v: 'mine' }).m);
    b.writes.noteEvent('k', 40_000);
    b.sent[0]?.ack(40_000);
    await b.deliver();
    expect(b.l1.peek('k')).toMatchObject({ json: '{"v":"mine"}', version: 40_000 });
  });

  it('an older event does not keep an acknowledged write out of L1', async () => {
    const b = book();
    b.writes.put(put('k', { v: 'mine' }).m);
    b.writes.noteEvent('k', 30_000);
    b.sent[0]?.ack(40_000);
    await b.deliver();
    expect(b.l1.peek('k')).toMatchObject({ json: '{"v":"mine"}', version: 40_000 });
  });

  it('an event noted while no write of the id is in flight is forgotten', async () => {
    const b = book();
    b.writes.noteEvent('k', 90_000);
    b.writes.put(put('k', { v: 'mine' }).m);
    b.sent[0]?.ack(40_000);
    await b.deliver();
    expect(b.l1.peek('k')).toMatchObject({ version: 40_000 });
  });

  it('a PUT the open circuit did not send drops L1 and answers ECC_VALKEY_UNAVAILABLE "not sent"', async () => {
    const b = book();
    b.l1.set('k', fresh({ v: 'old' }, b.now()), b.now());
    const { m, answer } = put('k', { v: 'new' });
    b.writes.put(m);
    b.writes.park('k', { kind: 'refresh', id: 'k', reason: 'stale' });
    b.sent[0]?.fail(new BreakerOpenError());
    await b.deliver();
    const err = await rejection(answer);
    expect(err.code).toBe('ECC_VALKEY_UNAVAILABLE');
    expect(err.message).toContain('not sent');
    expect(err.cause).toBeInstanceOf(BreakerOpenError);
    expect(b.l1.peek('k')).toBeUndefined();
    // Nothing reached Valkey: no Valkey error is counted.
    expect(b.ctx.counters.valkeyErrors).toEqual({});
    // What was parked behind it is replayed all the same.
    expect(b.replayed).toHaveLength(1);
    expect(b.writes.has('k')).toBe(false);
  });

  it('a PUT that timed out drops L1 and answers ECC_VALKEY_UNAVAILABLE "may or may not have been applied"', async () => {
    const b = book();
    b.l1.set('k', fresh({ v: 'old' }, b.now()), b.now());
    const { m, answer } = put('k', { v: 'new' });
    b.writes.put(m);
    b.sent[0]?.fail(new Error('Command timed out'));
    await b.deliver();
    const err = await rejection(answer);
    expect(err.code).toBe('ECC_VALKEY_UNAVAILABLE');
    expect(err.message).toContain('may or may not');
    expect(b.l1.peek('k')).toBeUndefined();
    expect(b.ctx.counters.valkeyErrors).toEqual({ put: 1 });
  });

  it('a DELETE drops L1 at once, writes a tombstone kept leaseMs + 60 s, and answers when acknowledged', async () => {
    const b = book();
    b.l1.set('k', fresh({ v: 'old' }, b.now()), b.now());
    const w = waiter<void>();
    b.writes.invalidate({ kind: 'invalidate', id: 'k', waiter: w.waiter });
    expect(b.l1.peek('k')).toBeUndefined();
    const sent = b.sent[0] as SentWrite;
    expect(sent.kind).toBe('del');
    // Never fresh: it expires the moment it is written (the script sets that on Valkey's clock).
    const now = b.ctx.now();
    expect(sent.envelope).toMatchObject({ negative: true, softExpiresAt: now, hardExpiresAt: now });
    expect(sent.pxMs).toBe(3_000 + 60_000);
    b.writes.park('k', { kind: 'refresh', id: 'k', reason: 'stale' });
    sent.ack(77_000);
    await b.deliver();
    await w.promise;
    expect(b.ctx.counters.invalidations).toBe(1);
    expect(b.replayed).toHaveLength(1);
    // The clock observed the tombstone's version (Valkey's): flights start at it.
    expect(b.ctx.clock.last).toBe(77_000);
  });

  it.each([
    ['the open circuit did not send it', new BreakerOpenError(), 'not sent', {}],
    ['it timed out', new Error('Command timed out'), 'may or may not', { del: 1 }],
  ])(
    'a DELETE that failed because %s answers ECC_VALKEY_UNAVAILABLE "%s"',
    async (_, cause, text, counted) => {
      const b = book();
      const w = waiter<void>();
      b.writes.invalidate({ kind: 'invalidate', id: 'k', waiter: w.waiter });
      b.sent[0]?.fail(cause);
      await b.deliver();
      const err = await rejection(w.promise);
      expect(err.code).toBe('ECC_VALKEY_UNAVAILABLE');
      expect(err.message).toContain(text);
      expect(err.message).toContain('the delete');
      expect(b.ctx.counters.valkeyErrors).toEqual(counted);
      expect(b.ctx.counters.invalidations).toBe(0);
    },
  );

  it('abandon forgets a write without replaying; drain hands back each write in flight and what is parked behind it', () => {
    const b = book();
    b.writes.put(put('a', 1).m);
    const second = put('b', 2).m;
    b.writes.put(second);
    const parked: Message = { kind: 'refresh', id: 'a', reason: 'stale' };
    b.writes.park('a', parked);
    expect(b.writes.size).toBe(2);
    expect(b.writes.abandon('a')).toEqual([parked]);
    expect(b.writes.has('a')).toBe(false);
    expect(b.replayed).toEqual([]);
    expect(b.writes.abandon('none')).toEqual([]);
    expect(b.writes.drain()).toEqual([['b', [second]]]);
    expect(b.writes.size).toBe(0);
  });
});
