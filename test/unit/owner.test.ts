import { describe, expect, it, vi } from 'vitest';
import { LoadFailedError } from '../../src/errors.js';
import type { TableEvent } from '../../src/l2/events.js';
import type { Envelope } from '../../src/l2/format.js';
import type { WriteAck, WriteKind } from '../../src/l2/scripts.js';
import type { TablePolicyInput } from '../../src/store/policy.js';
import type { WriteResult } from '../../src/store/types.js';
import { fakeOwner, fresh, settle } from '../helpers/fake-table.js';
import { errorOf } from '../helpers/probe.js';
import { deferred } from '../helpers/store.js';

/** An owner whose `l2.write` (PUT, DELETE) the test acknowledges by hand. */
function writingOwner(policy: TablePolicyInput = {}) {
  const sent: Array<{ id: string; kind: WriteKind; ack(version: number): void }> = [];
  const t = fakeOwner(policy, {
    // A close waits no longer for a write in flight than it is asked to (the real L2: up to 5 s).
    writeDeadlineMs: 0,
    write(id, _envelope, _now, _pxMs, kind) {
      const answer = deferred<WriteAck>();
      sent.push({
        id,
        kind,
        ack: (version) => answer.resolve({ version, valkeyNowMs: Math.floor(version / 1000) }),
      });
      return answer.promise;
    },
  });
  const put = (id: string, value: unknown): Promise<Pick<WriteResult, 'version'>> =>
    new Promise((resolve, reject) =>
      t.owner.post({
        kind: 'put',
        id,
        value,
        json: JSON.stringify(value),
        waiter: { resolve, reject },
      }),
    );
  const invalidate = (id: string): Promise<void> =>
    new Promise((resolve, reject) =>
      t.owner.post({ kind: 'invalidate', id, waiter: { resolve, reject } }),
    );
  return { ...t, sent, put, invalidate };
}

/** A row of `value` gone stale `agoMs` ago at `now`, still within its hard TTL for a minute. */
/** Starts `owner.close` (a long grace); the result tells whether it has resolved yet. */
function closing(owner: { close(graceMs: number): Promise<void> }): () => boolean {
  let closed = false;
  void owner.close(60_000).then(() => {
    closed = true;
  });
  return () => closed;
}

function staleRow(value: unknown, now: number, agoMs = 10): Envelope {
  return { ...fresh(value, now - agoMs, 0), hardExpiresAt: now + 60_000 };
}

/** A landing with a value from `layer`, kept unless `refused`. */
function value(envelope: Envelope, layer: 'l2' | 'origin' = 'origin', refused = false) {
  return { kind: 'value', envelope, layer, refused } as const;
}

describe('table owner (state machine, no Valkey)', () => {
  it('duplicate fills coalesce onto one flight; every waiter gets its one answer', async () => {
    const t = fakeOwner();
    const answers = [t.fill('k'), t.fill('k'), t.fill('k')];
    await settle();
    expect(t.runs).toHaveLength(1);
    expect(t.ctx.counters.coalesced).toBe(2);
    t.runs[0]?.land({
      kind: 'value',
      envelope: fresh({ n: 1 }, t.now()),
      layer: 'origin',
      refused: false,
    });
    const results = await Promise.all(answers);
    expect(results.map((r) => r.coalesced)).toEqual([false, true, true]);
    expect(new Set(results.map((r) => r.found && r.json))).toEqual(new Set(['{"n":1}']));
    expect(t.owner.flights).toBe(0);
    // The answer is in L1: the next fill is answered without a flight.
    expect(await t.fill('k')).toMatchObject({ layer: 'l1' });
    expect(t.runs).toHaveLength(1);
  });

  it('with coalescing none every fill launches its own flight', async () => {
    const t = fakeOwner({ coalescing: 'none' });
    void t.fill('k');
    void t.fill('k');
    await settle();
    expect(t.runs).toHaveLength(2);
    expect(t.ctx.counters.coalesced).toBe(0);
  });

  it('one error fails every waiter of the flight with the same error object', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    const b = t.fill('k');
    await settle();
    const error = new LoadFailedError('boom', { table: 't', id: 'k' });
    t.runs[0]?.land({ kind: 'error', error });
    expect(await errorOf(a)).toBe(error);
    expect(await errorOf(b)).toBe(error);
    expect(t.ctx.counters.loadErrors).toEqual({ ECC_LOAD_FAILED: 1 });
  });

  it('a runner that rejects (a bug) still answers every waiter, with ECC_INTERNAL', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    const b = t.fill('k');
    await settle();
    const bug = new TypeError('bug');
    t.runs[0]?.fail(bug);
    expect(await errorOf(a)).toMatchObject({ code: 'ECC_INTERNAL', id: 'k', cause: bug });
    expect((await errorOf(b)).code).toBe('ECC_INTERNAL');
    expect(t.owner.flights).toBe(0);
  });

  it('a handler that throws fails its own waiters with ECC_INTERNAL, and the mailbox drains on', async () => {
    const t = fakeOwner();
    const a = t.fill('bad');
    await settle();
    // L1 breaks while the flight lands: that landing's handler throws.
    const set = t.l1.set.bind(t.l1);
    t.l1.set = () => {
      throw new Error('broken L1');
    };
    t.runs[0]?.land({
      kind: 'value',
      envelope: fresh(1, t.now()),
      layer: 'origin',
      refused: false,
    });
    expect((await errorOf(a)).code).toBe('ECC_INTERNAL');
    t.l1.set = set;
    // The flight is gone (not stuck in the map), and later messages are handled.
    expect(t.owner.flights).toBe(0);
    const b = t.fill('bad');
    const c = t.fill('other');
    await settle();
    expect(t.runs).toHaveLength(3);
    t.runs[1]?.land({
      kind: 'value',
      envelope: fresh(2, t.now()),
      layer: 'origin',
      refused: false,
    });
    t.runs[2]?.land({
      kind: 'value',
      envelope: fresh(3, t.now()),
      layer: 'origin',
      refused: false,
    });
    expect(await b).toMatchObject({ value: 2 });
    expect(await c).toMatchObject({ value: 3 });
  });

  it('a refresh that skipped and was superseded meanwhile still answers the callers that joined it', async () => {
    const t = fakeOwner();
    t.l1.set(
      'k',
      { ...fresh({ old: true }, t.now(), 10), hardExpiresAt: t.now() + 60_000 },
      t.now(),
    );
    t.advance(20); // stale now
    t.owner.post({ kind: 'refresh', id: 'k', reason: 'stale' });
    await settle();
    expect(t.runs).toHaveLength(1);
    const refresh = t.runs[0];
    // A caller joins the refresh (its L1 row went away), then a DELETE elsewhere supersedes it.
    t.l1.delete('k');
    const joined = t.fill('k');
    await settle();
    t.owner.post({ kind: 'event', event: { k: 'del', id: 'k', v: Number.MAX_SAFE_INTEGER } });
    await settle();
    expect(refresh?.flight.superseded).toBe(true);
    refresh?.land({ kind: 'skipped', retryAfterMs: 1_000 });
    await settle();
    // Relaunched: a new flight carries the joined caller.
    expect(t.runs).toHaveLength(2);
    expect(t.runs[1]?.flight.waiters).toHaveLength(1);
    t.runs[1]?.land({
      kind: 'value',
      envelope: fresh({ new: true }, t.now()),
      layer: 'l2',
      refused: false,
    });
    expect(await joined).toMatchObject({ value: { new: true } });
  });

  it('a flight is removed by identity: a superseded flight landing leaves the newer one in place', async () => {
    const t = fakeOwner();
    const first = t.fill('k');
    await settle();
    t.owner.post({ kind: 'event', event: { k: 'put', id: 'k', v: Number.MAX_SAFE_INTEGER } });
    const second = t.fill('k');
    await settle();
    expect(t.runs).toHaveLength(2);
    t.runs[0]?.land({
      kind: 'value',
      envelope: fresh('old', t.now()),
      layer: 'origin',
      refused: false,
    });
    expect(await first).toMatchObject({ value: 'old' });
    expect(t.owner.flights).toBe(1);
    // The superseded flight wrote nothing to L1.
    expect(t.l1.peek('k')).toBeUndefined();
    const third = t.fill('k');
    await settle();
    expect(t.runs).toHaveLength(2);
    t.runs[1]?.land({
      kind: 'value',
      envelope: fresh('new', t.now()),
      layer: 'origin',
      refused: false,
    });
    expect(await second).toMatchObject({ value: 'new' });
    expect(await third).toMatchObject({ value: 'new', coalesced: true });
  });

  it('a refused fill answers its waiters but is not kept in L1', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    await settle();
    t.runs[0]?.land({
      kind: 'value',
      envelope: fresh('v', t.now()),
      layer: 'origin',
      refused: true,
    });
    expect(await a).toMatchObject({ value: 'v', stored: false });
    expect(t.l1.peek('k')).toBeUndefined();
  });

  it('serveStale answers the waiters now; the flight goes on as a background refresh', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    const b = t.fill('k');
    await settle();
    const stale = { ...fresh('stale', t.now() - 100, 10), hardExpiresAt: t.now() + 60_000 };
    t.runs[0]?.serveStale(stale);
    expect(await a).toMatchObject({ value: 'stale', stale: true, layer: 'l2', coalesced: false });
    expect(await b).toMatchObject({ value: 'stale', stale: true, layer: 'l2', coalesced: true });
    expect(t.ctx.counters.reads.stale).toBe(2);
    expect(t.ctx.counters.refreshes.stale).toBe(1);
    expect(t.runs[0]?.flight.background).toBe(true);
    t.runs[0]?.land({
      kind: 'value',
      envelope: fresh('new', t.now()),
      layer: 'origin',
      refused: false,
    });
    await settle();
    expect(t.l1.peek('k')?.json).toBe('"new"');
  });

  it('stale-if-error: a failed flight answers with the row still within its hard TTL', async () => {
    const t = fakeOwner();
    t.l1.set('k', { ...fresh('old', t.now(), 10), hardExpiresAt: t.now() + 60_000 }, t.now());
    t.advance(20);
    t.owner.post({ kind: 'refresh', id: 'k', reason: 'stale' });
    await settle();
    const joined = t.fill('k'); // answered stale from L1 at once
    expect(await joined).toMatchObject({ value: 'old', stale: true });
    t.runs[0]?.land({ kind: 'error', error: new LoadFailedError('down', { table: 't', id: 'k' }) });
    await settle();
    expect(t.ctx.counters.refreshFailures).toBe(1);
    // Backing off: a stale read does not ask for another refresh now.
    expect(t.owner.wantsRefresh('k', t.now())).toBe(false);
  });

  it('close fails what is left with ECC_CLOSED after the grace period, and refuses new work', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    await settle();
    await t.owner.close(10);
    expect((await errorOf(a)).code).toBe('ECC_CLOSED');
    expect(t.runs[0]?.flight.abort.signal.aborted).toBe(true);
    expect((await errorOf(t.fill('x'))).code).toBe('ECC_CLOSED');
  });

  it('close waits for running flights, and resolves as soon as the last one lands', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    await settle();
    const closed = closing(t.owner);
    await settle();
    expect(closed()).toBe(false);
    t.runs[0]?.land(value(fresh(1, t.now())));
    await settle();
    expect(closed()).toBe(true);
    expect(await a).toMatchObject({ value: 1 });
  });

  it('close resolves at once when nothing runs', async () => {
    const t = fakeOwner();
    const closed = closing(t.owner);
    await settle();
    expect(closed()).toBe(true);
  });

  it('close waits for a write in flight, and resolves once Valkey acknowledges it', async () => {
    const t = writingOwner();
    const written = t.put('k', 1);
    await settle();
    const closed = closing(t.owner);
    await settle();
    expect(closed()).toBe(false);
    t.sent[0]?.ack(1_000);
    expect(await written).toEqual({ version: 1_000 });
    await settle();
    expect(closed()).toBe(true);
  });
});

describe('table owner: misses, refreshes and counting', () => {
  it('a miss that finds its row in L1 meanwhile is answered from it; a stale row also starts one background refresh', async () => {
    const t = fakeOwner();
    t.l1.set('k', { ...fresh('v', t.now(), 10), hardExpiresAt: t.now() + 60_000 }, t.now());
    expect(await t.fill('k')).toMatchObject({ layer: 'l1', stale: false, coalesced: false });
    expect(t.ctx.counters.reads.l1).toBe(1);
    t.advance(10); // exactly at the soft expiry: stale
    expect(await t.fill('k')).toMatchObject({ layer: 'l1', stale: true, value: 'v' });
    expect(t.ctx.counters.reads.stale).toBe(1);
    await settle();
    expect(t.runs).toHaveLength(1);
    expect(t.runs[0]?.flight.background).toBe(true);
    expect(t.ctx.counters.refreshes.stale).toBe(1);
    t.l1.set('n', { ...fresh(null, t.now()), json: 'null', negative: true }, t.now());
    expect(await t.fill('n')).toMatchObject({ found: false, layer: 'l1' });
    expect(t.ctx.counters.reads.negative).toBe(1);
  });

  it('callers beyond maxWaitersPerFlight are shed with ECC_SHED; the flight answers the others', async () => {
    const t = fakeOwner({ maxWaitersPerFlight: 2 });
    const a = t.fill('k');
    const b = t.fill('k');
    const c = errorOf(t.fill('k'));
    await settle();
    expect(await c).toMatchObject({ code: 'ECC_SHED', table: 't', id: 'k' });
    expect(t.ctx.counters.shed).toBe(1);
    t.runs[0]?.land(value(fresh(1, t.now())));
    expect(await Promise.all([a, b])).toMatchObject([{ value: 1 }, { value: 1 }]);
  });

  it('an answer from L2 counts an l2 hit and is not "stored"; an origin answer kept in L1 is; "not found" counts as negative', async () => {
    const t = fakeOwner();
    const fromL2 = [t.fill('a'), t.fill('a')];
    const fromOrigin = [t.fill('o'), t.fill('o'), t.fill('p')];
    const notFound = t.fill('n');
    await settle();
    t.runs[0]?.land(value(fresh('x', t.now()), 'l2'));
    t.runs[1]?.land(value(fresh('y', t.now()), 'origin'));
    t.runs[2]?.land(value(fresh('z', t.now()), 'origin'));
    t.runs[3]?.land(value({ ...fresh(null, t.now()), json: 'null', negative: true }, 'origin'));
    expect((await Promise.all(fromL2)).map((r) => r.stored)).toEqual([false, false]);
    expect((await Promise.all(fromOrigin)).map((r) => r.stored)).toEqual([true, true, true]);
    expect(await notFound).toMatchObject({ found: false, stored: true });
    expect(t.ctx.counters.l2_hits).toBe(1);
    expect(t.ctx.counters.reads).toMatchObject({ l2: 2, origin: 3, negative: 1 });
  });

  it('a failed load with callers is not a refresh failure: the id does not back off', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    await settle();
    t.runs[0]?.land({ kind: 'error', error: new LoadFailedError('down', { table: 't', id: 'k' }) });
    expect((await errorOf(a)).code).toBe('ECC_LOAD_FAILED');
    expect(t.ctx.counters.refreshFailures).toBe(0);
    expect(t.owner.wantsRefresh('k', t.now())).toBe(true);
  });

  it('stale-if-error answers every caller of a failed flight with the row within its hard TTL, never with a negative row', async () => {
    const t = fakeOwner();
    const callers = [t.fill('k'), t.fill('k')];
    const negative = errorOf(t.fill('n'));
    await settle();
    // Rows that reached L1 while the flights ran (written by this instance meanwhile).
    t.l1.set('k', staleRow('old', t.now()), t.now());
    t.l1.set('n', { ...fresh(null, t.now()), json: 'null', negative: true }, t.now());
    const error = new LoadFailedError('down', { table: 't', id: 'k' });
    t.runs[0]?.land({ kind: 'error', error });
    t.runs[1]?.land({ kind: 'error', error });
    expect(await Promise.all(callers)).toMatchObject([
      { value: 'old', stale: true, layer: 'l1', coalesced: false },
      { value: 'old', stale: true, layer: 'l1', coalesced: true },
    ]);
    expect(t.ctx.counters.reads.stale).toBe(2);
    expect(await negative).toBe(error);
  });

  it('serveStale for a superseded flight, or for one nobody waits on, changes nothing', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    t.owner.post({ kind: 'refresh', id: 'r', reason: 'early' });
    await settle();
    t.owner.post({ kind: 'event', event: { k: 'put', id: 'k', v: Number.MAX_SAFE_INTEGER } });
    await settle();
    t.runs[0]?.serveStale(staleRow('stale', t.now()));
    t.runs[1]?.serveStale(staleRow('stale', t.now()));
    await settle();
    expect(t.l1.peek('k')).toBeUndefined();
    expect(t.l1.peek('r')).toBeUndefined();
    expect(t.ctx.counters.reads.stale).toBe(0);
    expect(t.ctx.counters.refreshes.stale).toBe(0);
    t.runs[0]?.land(value(fresh('new', t.now())));
    expect(await a).toMatchObject({ value: 'new', stale: false });
  });

  it('a refresh is not started while a flight of the id runs; one that starts replaces the version L1 holds', async () => {
    const t = fakeOwner();
    t.l1.set('k', fresh('v', t.now(), 60_000, 7), t.now());
    t.owner.post({ kind: 'refresh', id: 'k', reason: 'early' });
    t.owner.post({ kind: 'refresh', id: 'k', reason: 'early' });
    t.owner.post({ kind: 'refresh', id: 'none', reason: 'stale' });
    await settle();
    expect(t.runs.map((r) => [r.flight.id, r.flight.replaceUpTo])).toEqual([
      ['k', 7],
      ['none', 0],
    ]);
    expect(t.ctx.counters.refreshes).toEqual({ early: 1, stale: 1, revalidate: 0, purge: 0 });
  });

  it('wants no refresh while closed, while a flight or a write of the id runs, or while the id backs off', async () => {
    const t = writingOwner();
    expect(t.owner.wantsRefresh('k', t.now())).toBe(true);
    const loading = t.fill('f');
    void t.put('w', 1);
    t.owner.post({ kind: 'refresh', id: 'b', reason: 'stale' });
    await settle();
    expect(t.owner.wantsRefresh('f', t.now())).toBe(false);
    expect(t.owner.wantsRefresh('w', t.now())).toBe(false);
    t.runs[1]?.land({ kind: 'error', error: new LoadFailedError('down', { table: 't', id: 'b' }) });
    await settle();
    expect(t.owner.wantsRefresh('b', t.now())).toBe(false);
    expect(t.owner.wantsRefresh('b', t.now() + 1_000)).toBe(true);
    expect(t.owner.wantsRefresh('k', t.now())).toBe(true);
    t.runs[0]?.land(value(fresh(1, t.now())));
    await loading;
    t.sent[0]?.ack(1_000);
    await t.owner.close(60_000);
    expect(t.owner.wantsRefresh('k', t.now())).toBe(false);
  });

  it('a refresh that finds another instance refreshing holds further refreshes of the id until that lease runs out', async () => {
    const t = fakeOwner();
    t.owner.post({ kind: 'refresh', id: 'k', reason: 'early' });
    await settle();
    t.runs[0]?.land({ kind: 'skipped', retryAfterMs: 1_000 });
    await settle();
    // Nobody had joined it: nothing is relaunched.
    expect(t.runs).toHaveLength(1);
    expect(t.owner.flights).toBe(0);
    expect(t.owner.wantsRefresh('k', t.now() + 999)).toBe(false);
    expect(t.owner.wantsRefresh('k', t.now() + 1_000)).toBe(true);
    expect(t.ctx.counters.refreshFailures).toBe(0);
  });

  it('callers that joined a skipped refresh join the id’s running flight when there is one', async () => {
    const t = fakeOwner();
    t.owner.post({ kind: 'refresh', id: 'k', reason: 'early' });
    await settle();
    const joined = t.fill('k');
    await settle();
    expect(t.ctx.counters.coalesced).toBe(1);
    t.owner.post({ kind: 'event', event: { k: 'put', id: 'k', v: Number.MAX_SAFE_INTEGER } });
    const next = t.fill('k');
    await settle();
    t.runs[0]?.land({ kind: 'skipped', retryAfterMs: 1_000 });
    await settle();
    expect(t.runs).toHaveLength(2);
    expect(t.runs[1]?.flight.waiters).toHaveLength(2);
    t.runs[1]?.land(value(fresh('new', t.now())));
    expect(await Promise.all([next, joined])).toMatchObject([{ value: 'new' }, { value: 'new' }]);
  });

  it('counts the messages posted and not yet handled', async () => {
    const t = fakeOwner();
    t.owner.post({ kind: 'flush' });
    t.owner.post({ kind: 'flush' });
    expect(t.owner.mailboxDepth).toBe(2);
    await settle();
    expect(t.owner.mailboxDepth).toBe(0);
  });
});

describe('table owner: writes of an id', () => {
  it('a miss while a PUT of the id awaits Valkey waits behind it, and is answered with the written value without a load', async () => {
    const t = writingOwner();
    const written = t.put('k', { v: 'put' });
    await settle();
    const read = t.fill('k');
    await settle();
    expect(t.runs).toHaveLength(0);
    t.sent[0]?.ack(42_000);
    expect(await written).toEqual({ version: 42_000 });
    expect(await read).toMatchObject({ layer: 'l1', value: { v: 'put' }, version: 42_000 });
    expect(t.runs).toHaveLength(0);
  });

  it('a write of an id is sent only once the one before it is acknowledged', async () => {
    const t = writingOwner();
    const first = t.put('k', 1);
    const second = t.put('k', 2);
    const deleted = t.invalidate('k');
    await settle();
    expect(t.sent).toHaveLength(1);
    t.sent[0]?.ack(1_000);
    await first;
    await settle();
    expect(t.sent).toHaveLength(2);
    t.sent[1]?.ack(2_000);
    expect(await second).toEqual({ version: 2_000 });
    await settle();
    expect(t.sent.map((w) => w.kind)).toEqual(['put', 'put', 'del']);
    t.sent[2]?.ack(3_000);
    await deleted;
    expect(t.l1.peek('k')).toBeUndefined();
  });

  it('a forced close fails the write still unanswered and the messages parked behind it with ECC_CLOSED', async () => {
    const t = writingOwner();
    const write = errorOf(t.put('k', 1));
    await settle();
    const read = errorOf(t.fill('k'));
    await settle();
    await t.owner.close(0);
    expect(await write).toMatchObject({ code: 'ECC_CLOSED', id: 'k' });
    expect(await read).toMatchObject({ code: 'ECC_CLOSED', id: 'k' });
  });

  it('a parked message whose replay throws fails alone: the write before it is answered', async () => {
    const t = writingOwner();
    const written = t.put('k', 1);
    await settle();
    const read = errorOf(t.fill('k'));
    await settle();
    vi.spyOn(t.l1, 'get').mockImplementationOnce(() => {
      throw new Error('broken L1');
    });
    t.sent[0]?.ack(1_000);
    expect(await written).toEqual({ version: 1_000 });
    expect(await read).toMatchObject({ code: 'ECC_INTERNAL', id: 'k' });
  });

  it('a PUT detaches the running flight of the id: its callers get its answer, L1 keeps the PUT', async () => {
    const t = writingOwner();
    const read = t.fill('k');
    await settle();
    const written = t.put('k', 'put');
    await settle();
    expect(t.owner.flights).toBe(0);
    t.sent[0]?.ack(42_000);
    await written;
    t.runs[0]?.land(value(fresh('old', t.now())));
    expect(await read).toMatchObject({ value: 'old', stored: false });
    expect(t.l1.peek('k')).toMatchObject({ json: '"put"' });
  });

  it('a DELETE detaches the running flight of the id, whose answer then stays out of L1, and answers once acknowledged', async () => {
    const t = writingOwner();
    const read = t.fill('k');
    await settle();
    const deleted = t.invalidate('k');
    await settle();
    expect(t.sent.map((w) => w.kind)).toEqual(['del']);
    t.runs[0]?.land(value(fresh('old', t.now())));
    expect(await read).toMatchObject({ value: 'old' });
    expect(t.l1.peek('k')).toBeUndefined();
    t.sent[0]?.ack(50_000);
    await deleted;
    expect(t.ctx.counters.invalidations).toBe(1);
  });

  it('a PUT acknowledged after another instance’s newer write was announced does not go into L1', async () => {
    const t = writingOwner();
    const written = t.put('k', 'mine');
    await settle();
    t.owner.post({ kind: 'event', event: { k: 'put', id: 'k', v: 50_000 } });
    await settle();
    t.sent[0]?.ack(40_000);
    expect(await written).toEqual({ version: 40_000 });
    expect(t.l1.peek('k')).toBeUndefined();
  });

  it('after close, PUT and DELETE are refused with ECC_CLOSED', async () => {
    const t = writingOwner();
    await t.owner.close(0);
    expect(await errorOf(t.put('k', 1))).toMatchObject({ code: 'ECC_CLOSED', id: 'k' });
    expect(await errorOf(t.invalidate('k'))).toMatchObject({ code: 'ECC_CLOSED', id: 'k' });
    expect(t.sent).toHaveLength(0);
  });

  it.each([
    ['PUT', 'set'],
    ['DELETE', 'delete'],
  ] as const)(
    'a %s acknowledgement whose handler throws answers ECC_INTERNAL and still releases the miss parked behind it',
    async (kind, method) => {
      const t = writingOwner();
      const write = kind === 'PUT' ? t.put('k', 1) : t.invalidate('k');
      await settle();
      const read = t.fill('k');
      await settle();
      vi.spyOn(t.l1, method).mockImplementationOnce(() => {
        throw new Error('broken L1');
      });
      t.sent[0]?.ack(1_000);
      expect(await errorOf(write)).toMatchObject({ code: 'ECC_INTERNAL', table: 't', id: 'k' });
      await settle();
      // The parked miss was handled: it launched a load.
      expect(t.runs).toHaveLength(1);
      t.runs[0]?.land(value(fresh('loaded', t.now())));
      expect(await read).toMatchObject({ value: 'loaded' });
    },
  );

  it('a flush drops every L1 row and is counted', async () => {
    const t = fakeOwner();
    t.l1.set('a', fresh(1, t.now()), t.now());
    t.l1.set('b', fresh(2, t.now()), t.now());
    t.owner.post({ kind: 'flush' });
    await settle();
    expect(t.l1.size).toBe(0);
    expect(t.ctx.counters.l1Flushes).toBe(1);
  });

  it('a flight running through a flush answers its callers and writes L2 but does not go into L1 (it may have missed an event)', async () => {
    const t = fakeOwner();
    const read = t.fill('k');
    await settle();
    t.owner.post({ kind: 'flush' });
    await settle();
    // Not superseded: the runner still writes L2, where the lease and the mark fence the fill.
    expect(t.runs[0]?.flight).toMatchObject({ superseded: false, eventsMissed: true });
    // A miss after the flush does not join it: it launches its own load.
    const after = t.fill('k');
    await settle();
    expect(t.runs).toHaveLength(2);
    t.runs[0]?.land(value(fresh('read before the flush', t.now())));
    expect(await read).toMatchObject({ value: 'read before the flush' });
    expect(t.l1.peek('k')).toBeUndefined();
    t.runs[1]?.land(value(fresh('read after the flush', t.now())));
    expect(await after).toMatchObject({ value: 'read after the flush' });
    expect(t.l1.peek('k')).toBeDefined();
  });
});

describe('table owner: coherence events', () => {
  const post = (t: ReturnType<typeof fakeOwner>, event: TableEvent) =>
    t.owner.post({ kind: 'event', event });

  it('an event drops an L1 row only when it is newer than the row, and counts what it did', async () => {
    const t = fakeOwner();
    t.l1.set('k', fresh('v', t.now(), 60_000, 10), t.now());
    post(t, { k: 'put', id: 'k', v: 9 });
    post(t, { k: 'fill', id: 'k', v: 10 });
    await settle();
    expect(t.l1.peek('k')).toBeDefined();
    expect(t.ctx.counters.coherence).toEqual({ applied: 0, stale: 2 });
    post(t, { k: 'put', id: 'k', v: 11 });
    await settle();
    expect(t.l1.peek('k')).toBeUndefined();
    expect(t.ctx.counters.coherence).toEqual({ applied: 1, stale: 2 });
  });

  it('release events, events without a version, and events for ids this instance does not hold change nothing', async () => {
    const t = fakeOwner();
    const failed = vi.spyOn(t.ctx.log, 'error');
    t.l1.set('k', fresh('v', t.now(), 60_000, 10), t.now());
    const a = t.fill('j');
    await settle();
    post(t, { k: 'release', id: 'k', v: 99 });
    post(t, { k: 'release', id: 'j', v: Number.MAX_SAFE_INTEGER });
    post(t, { k: 'del', id: 'k' });
    post(t, { k: 'put', id: 'nothing-here', v: 99 });
    await settle();
    expect(t.l1.peek('k')).toBeDefined();
    expect(t.ctx.counters.coherence).toEqual({ applied: 0, stale: 0 });
    expect(t.runs[0]?.flight.superseded).toBe(false);
    expect(failed).not.toHaveBeenCalled();
    t.runs[0]?.land(value(fresh(1, t.now())));
    await a;
  });

  it('a PUT or DELETE event newer than a flight’s start supersedes it; a fill event, or an older write, does not', async () => {
    const t = fakeOwner();
    t.ctx.clock.wrote(5_000, 5); // this instance has seen version 5,000
    const a = t.fill('k');
    await settle();
    const flight = t.runs[0]?.flight;
    expect(flight?.startVersion).toBe(5_000);
    post(t, { k: 'put', id: 'k', v: 4_000 });
    post(t, { k: 'del', id: 'k', v: 5_000 });
    post(t, { k: 'fill', id: 'k', v: 9_000 });
    await settle();
    expect(flight?.superseded).toBe(false);
    expect(t.owner.flights).toBe(1);
    post(t, { k: 'del', id: 'k', v: 5_001 });
    await settle();
    expect(flight?.superseded).toBe(true);
    expect(t.owner.flights).toBe(0);
    t.runs[0]?.land(value(fresh('old', t.now())));
    expect(await a).toMatchObject({ value: 'old' });
    expect(t.l1.peek('k')).toBeUndefined();
  });
});

describe('table owner: a handler that throws', () => {
  it('a superseded flight whose landing throws leaves the newer flight of the id in place', async () => {
    const t = fakeOwner();
    const first = errorOf(t.fill('k'));
    await settle();
    t.owner.post({ kind: 'event', event: { k: 'put', id: 'k', v: Number.MAX_SAFE_INTEGER } });
    const second = t.fill('k');
    await settle();
    vi.spyOn(t.ctx, 'now').mockImplementationOnce(() => {
      throw new Error('broken clock');
    });
    t.runs[0]?.land(value(fresh('old', t.now())));
    expect(await first).toMatchObject({ code: 'ECC_INTERNAL' });
    expect(t.owner.flights).toBe(1);
    const third = t.fill('k');
    await settle();
    expect(t.runs).toHaveLength(2);
    t.runs[1]?.land(value(fresh('new', t.now())));
    expect(await Promise.all([second, third])).toMatchObject([{ value: 'new' }, { value: 'new' }]);
  });

  it('a failing miss answers ECC_INTERNAL naming the table and id, with the cause', async () => {
    const t = fakeOwner();
    const broken = new Error('broken L1');
    vi.spyOn(t.l1, 'get').mockImplementationOnce(() => {
      throw broken;
    });
    expect(await errorOf(t.fill('k'))).toMatchObject({
      code: 'ECC_INTERNAL',
      table: 't',
      id: 'k',
      cause: broken,
    });
  });

  it('a flight whose handler throws before it lands is removed: the next miss launches a new flight, and the old one answers nobody twice', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    await settle();
    vi.spyOn(t.l1, 'set').mockImplementationOnce(() => {
      throw new Error('broken L1');
    });
    t.runs[0]?.serveStale(staleRow('stale', t.now()));
    expect(await errorOf(a)).toMatchObject({ code: 'ECC_INTERNAL', table: 't', id: 'k' });
    expect(t.owner.flights).toBe(0);
    const b = t.fill('k');
    await settle();
    expect(t.runs).toHaveLength(2);
    // The orphaned flight lands: it leaves the new flight in place and counts no answer.
    t.runs[0]?.land(value(fresh('orphan', t.now())));
    await settle();
    expect(t.owner.flights).toBe(1);
    expect(t.ctx.counters.reads.origin).toBe(0);
    t.runs[1]?.land(value(fresh('new', t.now())));
    expect(await b).toMatchObject({ value: 'new' });
  });
});
