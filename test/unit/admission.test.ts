import { afterEach, describe, expect, it, vi } from 'vitest';
import { ShedError } from '../../src/errors.js';
import { Admission, type Permit } from '../../src/protection/admission.js';
import { delay } from '../helpers/store.js';

function admission(
  maxLimit: number,
  maxQueueDelayMs = 1_000,
  maxQueued = 100,
  initialLimit?: number,
) {
  // Not 0: a clock reading must never be mistaken for a duration.
  let now = 10_000;
  const a = new Admission({
    maxLimit,
    maxQueueDelayMs,
    maxQueued,
    now: () => now,
    ...(initialLimit === undefined ? {} : { initialLimit }),
  });
  const shed = (retryAfterMs: number) => new ShedError('shed', { retryAfterMs });
  return {
    a,
    take: (id?: string) => a.acquire(shed, id),
    advance(ms: number) {
      now += ms;
    },
  };
}

/** Runs `n` loads one after another, each taking `ms`, ending `end`; all of `id` when given. */
async function loads(
  t: ReturnType<typeof admission>,
  n: number,
  ms: number,
  end: 'ok' | 'failed' = 'ok',
  id?: string,
) {
  for (let i = 0; i < n; i++) {
    const p = await t.take(id);
    t.advance(ms);
    p.release(end);
  }
}

/** Runs `n` waves of loads, each as many at once as the limit allows, each load taking `ms`. */
async function waves(t: ReturnType<typeof admission>, n: number, ms: number) {
  for (let i = 0; i < n; i++) {
    const permits = await Promise.all(Array.from({ length: t.a.limit }, () => t.take()));
    t.advance(ms);
    for (const p of permits) p.release('ok');
  }
}

describe('admission: adaptive limit, shedding by queueing delay', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('without an initial limit starts at maxConcurrentLoads and queues the next load FIFO; a release hands the slot on', async () => {
    const t = admission(2);
    const p1 = await t.take();
    await t.take();
    const order: string[] = [];
    const q1 = t.take().then((p) => {
      order.push('q1');
      return p;
    });
    const q2 = t.take().then((p) => {
      order.push('q2');
      return p;
    });
    expect(t.a.queued).toBe(2);
    p1.release('ok');
    (await q1).release('ok');
    await q2;
    expect(order).toEqual(['q1', 'q2']);
    expect(t.a.active).toBe(2);
  });

  it('a healthy source keeps the limit at its ceiling', async () => {
    const t = admission(16);
    await loads(t, 200, 20);
    expect(t.a.limit).toBe(16);
  });

  it('when loads get much slower the limit shrinks, and grows back once they are fast again under load', async () => {
    const t = admission(16);
    await loads(t, 50, 20);
    await loads(t, 6, 500);
    const slowLimit = t.a.limit;
    expect(slowLimit).toBeLessThan(16);
    expect(slowLimit).toBeGreaterThanOrEqual(1);
    await waves(t, 10, 20);
    expect(t.a.limit).toBe(16);
  });

  it('starts at the initial limit and, while loads stay as fast as usual with the limit in use, grows to maxConcurrentLoads', async () => {
    const t = admission(256, 1_000, 100, 16);
    expect(t.a.limit).toBe(16);
    await waves(t, 1, 20);
    // Loads that started with half the limit in use or more grow it by its square root: at
    // most about twice the loads that ran at once (a wave of 16), like TCP's slow start.
    expect(t.a.limit).toBeGreaterThan(24);
    expect(t.a.limit).toBeLessThanOrEqual(2 * 16 + Math.sqrt(2 * 16));
    await waves(t, 5, 20);
    expect(t.a.limit).toBe(256);
  });

  it('a limit the traffic does not use does not grow: one load at a time on a fast source leaves it where it starts', async () => {
    const t = admission(256, 1_000, 100, 16);
    await loads(t, 200, 20);
    expect(t.a.limit).toBe(16);
    // With half of it in use it grows: 8 at once is half of 16.
    const permits = await Promise.all(Array.from({ length: 8 }, () => t.take()));
    t.advance(20);
    for (const p of permits) p.release('ok');
    expect(t.a.limit).toBeGreaterThan(16);
  });

  it('a slowed source shrinks a grown limit even while little of it is in use, back toward the initial one and below', async () => {
    const t = admission(256, 1_000, 100, 16);
    await waves(t, 6, 20);
    expect(t.a.limit).toBe(256);
    await loads(t, 30, 500); // one at a time: far from half the limit in use
    expect(t.a.limit).toBeLessThan(16);
  });

  it('latency that rises with the limit (a burst queueing at the source or in this process) stops the growth above the initial limit', async () => {
    const t = admission(256, 1_000, 100, 16);
    // Each load takes 20 ms per 16 loads running at once: no headroom is free.
    let highest = 0;
    for (let i = 0; i < 40; i++) {
      await waves(t, 1, (20 * t.a.limit) / 16);
      highest = Math.max(highest, t.a.limit);
    }
    // Judged against the long-term average alone (which follows the latency up) it reached 256.
    // (The short-term average takes about ten loads to see the rise: it overshoots a little.)
    expect(highest).toBeLessThan(100);
    expect(t.a.limit).toBeLessThan(48);
    expect(t.a.limit).toBeGreaterThanOrEqual(16);
  });

  it('after a burst that queued, a slowed source gets the initial limit back, not the headroom', async () => {
    const t = admission(256, 1_000, 100, 16);
    await waves(t, 1, 20);
    // The burst's own queueing: latency climbs while the limit is at its highest.
    for (let i = 0; i < 10; i++) await waves(t, 1, 20 + 20 * i);
    await loads(t, 16, 500);
    expect(t.a.limit).toBeLessThanOrEqual(16);
  });

  it('the initial limit is at most maxConcurrentLoads and at least 1', () => {
    expect(admission(4, 1_000, 100, 16).a.limit).toBe(4);
    expect(admission(4, 1_000, 100, 0).a.limit).toBe(1);
  });

  it('a failure of an id that failed within ten seconds does not halve the limit again; other ids do, and so does the same id later', async () => {
    const t = admission(16);
    await loads(t, 1, 5, 'failed', 'poison');
    expect(t.a.limit).toBe(8);
    await loads(t, 20, 5, 'failed', 'poison'); // a client looping on it
    expect(t.a.limit).toBe(8);
    await loads(t, 1, 5, 'failed', 'other');
    expect(t.a.limit).toBe(4);
    t.advance(10_000);
    await loads(t, 1, 5, 'failed', 'poison'); // ten seconds after its last failure: counted again
    expect(t.a.limit).toBe(2);
  });

  it('a failed load halves the limit, never below 1', async () => {
    const t = admission(16);
    await loads(t, 1, 20, 'failed');
    expect(t.a.limit).toBe(8);
    await loads(t, 10, 20, 'failed');
    expect(t.a.limit).toBe(1);
  });

  it('a steady source (limit at its ceiling, loads as fast as usual) queues a load whose predicted wait (ahead ÷ limit × latency) plus one load fits in 80 % of maxQueueDelayMs, and sheds the next at once', async () => {
    const t = admission(1, 2_000);
    await loads(t, 1, 400); // latency 400 ms, limit 1 = its ceiling
    expect(t.a.admits(1_200)).toBe(true);
    expect(t.a.admits(1_201)).toBe(false);
    await t.take(); // runs
    // predicted 400, 800 and 1,200 ms, each + 400 ms for the running load's phase: queued
    for (let i = 0; i < 3; i++) t.take().catch(() => {});
    expect(t.a.queued).toBe(3);
    // predicted 4 × 400 = 1,600 ms + 400 ms > 80 % of 2,000 ms: shed (the rest is headroom
    // for loads that slow down while the queue waits)
    const shed = await t.take().catch((e: ShedError) => e);
    expect(shed).toBeInstanceOf(ShedError);
    expect((shed as ShedError).retryAfterMs).toBeGreaterThanOrEqual(2_000);
    expect(t.a.queued).toBe(3);
  });

  it('a limit growing from its initial value is steady: a load is queued within 80 % of the bound less one load', async () => {
    const t = admission(256, 2_000, 100, 16);
    await waves(t, 1, 20);
    expect(t.a.limit).toBeGreaterThan(16);
    expect(t.a.limit).toBeLessThan(256);
    expect(t.a.admits(1_580)).toBe(true);
    expect(t.a.admits(1_581)).toBe(false);
  });

  it('a limit cut below its initial value keeps the half headroom until it has grown back to it; headroom above it moving does not', async () => {
    const t = admission(256, 2_000, 100, 16);
    await waves(t, 1, 20);
    const grown = t.a.limit;
    await loads(t, 1, 20, 'failed');
    expect(t.a.limit).toBe(Math.floor(grown / 2)); // still at least 16
    expect(t.a.admits(1_580)).toBe(true);
    await loads(t, 2, 20, 'failed');
    expect(t.a.limit).toBeLessThan(16);
    expect(t.a.admits(1_001)).toBe(false);
    while (t.a.limit < 16) await waves(t, 1, 20);
    expect(t.a.admits(1_580)).toBe(true);
  });

  it('a source whose limit has shrunk keeps half of maxQueueDelayMs as headroom: the limit may shrink further under the queued loads', async () => {
    const t = admission(2, 2_000);
    await loads(t, 1, 400, 'failed'); // latency 400 ms, limit halved to 1
    expect(t.a.limit).toBe(1);
    expect(t.a.admits(1_000)).toBe(true);
    expect(t.a.admits(1_001)).toBe(false);
    await t.take(); // runs
    t.take().catch(() => {}); // predicted 1 × 400 = 400 ms: queued
    t.take().catch(() => {}); // predicted 2 × 400 = 800 ms: queued
    expect(t.a.queued).toBe(2);
    // predicted 3 × 400 = 1,200 ms > 1,000 ms (half the bound): shed
    const shed = await t.take().catch((e: ShedError) => e);
    expect(shed).toBeInstanceOf(ShedError);
    expect((shed as ShedError).retryAfterMs).toBeGreaterThanOrEqual(2_000);
    expect(t.a.queued).toBe(2);
  });

  it('loads more than twice as slow as usual keep the half headroom, even while the limit stays at its ceiling', async () => {
    const t = admission(16, 2_000);
    await loads(t, 50, 20);
    expect(t.a.admits(1_580)).toBe(true); // + 20 ms, the recent latency: 80 % of the bound
    expect(t.a.admits(1_581)).toBe(false);
    // 70 ms loads: the short-term latency (about ten loads) climbs past twice the long-term
    // one (about a hundred), while the limit, cut by the gradient and grown back by its
    // square root each time, stays at 16.
    let slow = 0;
    while (t.a.admits(1_001) && slow < 20) {
      await loads(t, 1, 70);
      slow++;
    }
    expect(slow).toBeGreaterThan(1); // one slow load is noise, not a slowdown
    expect(slow).toBeLessThan(20);
    expect(t.a.limit).toBe(16);
    expect(t.a.admits(1_000)).toBe(true);
    await loads(t, 30, 20); // fast again: steady again
    expect(t.a.admits(1_550)).toBe(true);
  });

  it('one slow load in a run of fast ones is noise: the limit and the whole bound stay', async () => {
    const t = admission(8, 1_000);
    await loads(t, 50, 100);
    await loads(t, 1, 450); // a tail sample of a source whose latency varies
    expect(t.a.limit).toBe(8);
    // Steady still: past half the bound (500 ms), within 80 % of it less the recent latency.
    expect(t.a.admits(600)).toBe(true);
  });

  it('sheds a queued load that has waited maxQueueDelayMs, and reports the queueing delay meanwhile', async () => {
    vi.useFakeTimers();
    const t = admission(1, 300);
    await t.take();
    const queued = t.take().catch((e: ShedError) => e);
    t.advance(120);
    expect(t.a.queueDelayMs).toBe(120);
    await vi.advanceTimersByTimeAsync(300);
    expect(await queued).toBeInstanceOf(ShedError);
    expect(t.a.queued).toBe(0);
    expect(t.a.queueDelayMs).toBe(0);
  });

  it('maxQueuedLoads bounds the queue whatever the predicted wait', async () => {
    const t = admission(1, 60_000, 2);
    await t.take();
    t.take().catch(() => {});
    t.take().catch(() => {});
    expect(await t.take().catch((e: ShedError) => e)).toBeInstanceOf(ShedError);
  });

  it('a permit released twice frees one slot', async () => {
    const t = admission(1);
    const p: Permit = await t.take();
    p.release('ok');
    p.release('ok');
    expect(t.a.active).toBe(0);
  });

  it('a release hands exactly one slot on', async () => {
    const t = admission(1);
    const p = await t.take();
    const q1 = t.take();
    t.take().catch(() => {});
    p.release('ok');
    await q1;
    expect(t.a.active).toBe(1);
    expect(t.a.queued).toBe(1);
  });

  it('a load whose predicted wait is exactly half of maxQueueDelayMs still queues while the limit is moving', async () => {
    const t = admission(2, 1_000);
    await loads(t, 1, 250, 'failed'); // latency 250 ms, limit 1 (halved): 250 ms per load ahead
    await t.take();
    t.take().catch(() => {}); // 250 ms
    t.take().catch(() => {}); // 500 ms: exactly half, queued
    expect(t.a.queued).toBe(2);
    expect(await t.take().catch((e: ShedError) => e)).toBeInstanceOf(ShedError); // 750 ms
  });

  it('before a busy period has a measured rate, each load ahead is predicted to take the recent latency ÷ the limit', async () => {
    const t = admission(4);
    expect(t.a.msPerQueuedLoad()).toBe(0);
    await loads(t, 4, 100);
    expect(t.a.limit).toBe(4);
    expect(t.a.msPerQueuedLoad()).toBe(25);
  });

  it('until two generations of loads have finished in a busy period, the history at its start predicts; then the measured drain', async () => {
    const t = admission(4, 10_000);
    await loads(t, 4, 100); // history: 100 ms a load, 4 at once → 25 ms per queued load
    const running = await Promise.all([t.take(), t.take(), t.take(), t.take()]);
    const queued = Array.from({ length: 12 }, () => t.take());
    const release = async (n: number) => {
      for (let i = 0; i < n; i++) {
        running.shift()?.release('ok');
        const next = queued.shift();
        if (next !== undefined) running.push(await next);
      }
    };
    t.advance(200); // the burst slowed its first loads: 200 ms, not 100
    await release(4);
    expect(t.a.msPerQueuedLoad()).toBe(25);
    // A load queued now neither restarts the busy period nor its count.
    queued.push(t.take());
    t.advance(200);
    await release(3);
    expect(t.a.msPerQueuedLoad()).toBe(25); // 7 finished: fewer than two generations
    await release(1);
    // 8 finished, the first 200 ms ago: 200 ms over the 7 since.
    expect(t.a.msPerQueuedLoad()).toBe(200 / 7);
  });

  it('a busy period whose loads all finished at its start has no measured rate yet', async () => {
    const t = admission(4, 10_000);
    await loads(t, 4, 100);
    const running = await Promise.all([t.take(), t.take(), t.take(), t.take()]);
    const queued = Array.from({ length: 8 }, () => t.take());
    for (const p of running) p.release('ok');
    for (const q of queued.slice(0, 4)) (await q).release('ok');
    expect(t.a.msPerQueuedLoad()).toBeGreaterThan(0);
  });

  it('the long-term latency is an average: after a long healthy run, a sustained slowdown still shrinks the limit', async () => {
    const t = admission(16);
    await loads(t, 200, 20);
    await loads(t, 3, 300);
    expect(t.a.limit).toBeLessThan(16);
  });

  it('runs on performance.now when no clock is given', async () => {
    const a = new Admission({ maxLimit: 1, maxQueueDelayMs: 1_000, maxQueued: 10 });
    const shed = (retryAfterMs: number) => new ShedError('shed', { retryAfterMs });
    const p = await a.acquire(shed);
    const queued = a.acquire(shed);
    expect(Number.isFinite(a.queueDelayMs)).toBe(true);
    expect(a.queueDelayMs).toBeGreaterThanOrEqual(0);
    p.release('ok');
    (await queued).release('ok');
  });
});

describe('admission: overdue loads leave the pool (a partitioned limit)', () => {
  function partitioned(maxLimit: number, maxOverdue: number) {
    let now = 10_000;
    const a = new Admission({
      maxLimit,
      maxQueueDelayMs: 5_000,
      maxQueued: 100,
      maxOverdue,
      now: () => now,
    });
    const shed = (retryAfterMs: number) => new ShedError('shed', { retryAfterMs });
    return {
      a,
      take: (id?: string) => a.acquire(shed, id),
      advance(ms: number) {
        now += ms;
      },
    };
  }
  type T = ReturnType<typeof partitioned>;
  /** Twenty loads of 20 ms: the usual latency is 20 ms, so a load is overdue after 200 ms. */
  const warm = (t: T) => loads(t as unknown as ReturnType<typeof admission>, 20, 20);

  it('a stalled pool (no load finished for 1 s) moves its loads out, and the queued load gets a slot', async () => {
    const t = partitioned(2, 4);
    await warm(t);
    expect(t.a.overdueAfterMs).toBe(200);
    await t.take('hang-1');
    await t.take('hang-2');
    t.advance(999);
    const waiting = t.take('healthy');
    // A fixed wait only to show that nothing moves before the pool has stalled for 1 s.
    await delay(30);
    expect(t.a.queued).toBe(1);
    expect(t.a.overdue).toBe(0);
    t.advance(1);
    (await waiting).release('ok');
    expect(t.a.overdue).toBe(2);
    expect(t.a.active).toBe(2);
  });

  it('a load overtaken by twice the limit of later loads, past ten times the usual latency, moves out', async () => {
    const t = partitioned(2, 4);
    await warm(t);
    const hung = await t.take('hang');
    for (let i = 0; i < 4; i++) {
      const p = await t.take(`o${i}`);
      t.advance(20); // as fast as usual: the overdue time stays 200 ms
      p.release('ok');
      t.advance(40);
    }
    await t.take('f');
    const g = await t.take('g'); // queued, until the sweep moves the hanging load out
    expect(t.a.overdue).toBe(1);
    g.release('ok');
    hung.release('failed');
  });

  it("an overdue load's end teaches the limit nothing: a timed-out hanging id does not halve it", async () => {
    const t = partitioned(2, 4);
    await warm(t);
    expect(t.a.limit).toBe(2);
    const hung = await t.take('hang');
    const filler = await t.take('filler');
    t.advance(1_000);
    const next = await t.take('next');
    expect(t.a.overdue).toBe(2);
    hung.release('failed');
    filler.release('failed');
    expect(t.a.limit).toBe(2);
    next.release('ok');
  });

  it('the queued loads a sweep lets in are swept too once the queue is empty: hanging ids at once do not halve the limit', async () => {
    const t = partitioned(2, 4);
    await warm(t);
    const hung = [await t.take('hang-1'), await t.take('hang-2')];
    const third = t.take('hang-3'); // queued
    t.advance(1_000); // the pool has stalled: the sweep moves both out and lets hang-3 in
    hung.push(await third);
    expect(t.a.overdue).toBe(2);
    expect(t.a.queued).toBe(0);
    t.advance(200); // hang-3 has run ten times the usual latency, in a pool still stalled
    await vi.waitFor(() => expect(t.a.overdue).toBe(3));
    for (const p of hung) p.release('failed');
    expect(t.a.limit).toBe(2);
  });

  it('an id whose load went overdue is admitted only to the overdue partition, and shed while it is full', async () => {
    const t = partitioned(1, 1);
    await warm(t);
    const first = await t.take('hang');
    t.advance(1_000);
    const healthy = await t.take('healthy');
    expect(t.a.overdue).toBe(1);
    // The same id again: only the partition may take it, and it is full.
    await expect(t.take('hang')).rejects.toMatchObject({ code: 'ECC_SHED' });
    first.release('failed');
    const again = await t.take('hang');
    expect(t.a.overdue).toBe(1);
    again.release('ok');
    healthy.release('ok');
  });

  it('beyond maxOverdue an overdue load keeps its slot: at most maxLimit + maxOverdue loads run at once', async () => {
    const t = partitioned(2, 1);
    await warm(t);
    await t.take('a');
    await t.take('b');
    t.advance(1_000);
    await t.take('c'); // a moved out (the partition holds one); c took its slot
    expect(t.a.overdue).toBe(1);
    t.advance(1_000);
    void t.take('d').catch(() => {}); // the partition is full: nothing moves, d waits
    // A fixed wait only to show that nothing more moves.
    await delay(30);
    expect(t.a.active).toBe(3);
    expect(t.a.queued).toBe(1);
  });
});
