import { describe, expect, it } from 'vitest';
import { LoadFailedError } from '../../src/errors.js';
import { fakeOwner, fresh, settle } from '../helpers/fake-table.js';
import { errorOf } from '../helpers/probe.js';

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
    t.runs[0]?.fail(new TypeError('bug'));
    expect((await errorOf(a)).code).toBe('ECC_INTERNAL');
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
    expect(await a).toMatchObject({ value: 'v' });
    expect(t.l1.peek('k')).toBeUndefined();
  });

  it('serveStale answers the waiters now; the flight goes on as a background refresh', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    await settle();
    const stale = { ...fresh('stale', t.now() - 100, 10), hardExpiresAt: t.now() + 60_000 };
    t.runs[0]?.serveStale(stale);
    expect(await a).toMatchObject({ value: 'stale', stale: true, layer: 'l2' });
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

  it('close waits for running flights that land within the grace period', async () => {
    const t = fakeOwner();
    const a = t.fill('k');
    await settle();
    const closing = t.owner.close(5_000);
    t.runs[0]?.land({
      kind: 'value',
      envelope: fresh(1, t.now()),
      layer: 'origin',
      refused: false,
    });
    await closing;
    expect(await a).toMatchObject({ value: 1 });
  });
});
