/**
 * A table owner with no Valkey and no loader: flights run by a fake runner the
 * test controls, writes by a fake L2. For the owner's state machine.
 */
import { pino } from 'pino';
import type { Flight, Outcome, TableContext } from '../../src/actor/flight.js';
import { TableOwner } from '../../src/actor/owner.js';
import type { Envelope } from '../../src/l2/format.js';
import type { L2 } from '../../src/l2/scripts.js';
import { newCounters } from '../../src/metrics.js';
import { Admission } from '../../src/protection/admission.js';
import { Epochs } from '../../src/store/epochs.js';
import { L1 } from '../../src/store/l1.js';
import { NotFoundConfirmations } from '../../src/store/not-found.js';
import { resolvePolicy, type TablePolicyInput } from '../../src/store/policy.js';
import type { ReadResult } from '../../src/store/types.js';
import { VersionClock } from '../../src/store/version-clock.js';
import { deferred } from './store.js';

/** One launched flight: the test lands it with `land(outcome)`, or serves stale with `serveStale`. */
export interface FakeRun {
  flight: Flight;
  land(outcome: Outcome): void;
  fail(error: unknown): void;
  serveStale(envelope: Envelope): void;
  /** The holder's load returned and its fill is sent (`FlightReports.loaded`). */
  loaded(envelope: Envelope): void;
}

/** A fresh envelope for `value`, minted at `now`, good for `ttlMs`. */
export function fresh(value: unknown, now: number, ttlMs = 60_000, version = 1): Envelope {
  return {
    value,
    json: JSON.stringify(value),
    version,
    softExpiresAt: now + ttlMs,
    hardExpiresAt: now + ttlMs,
    deltaMs: 1,
    negative: false,
  };
}

/**
 * A table context with no Valkey and no loader, on a clock the test moves:
 * `l2` holds only the commands a test fakes.
 */
export function fakeContext(policy: TablePolicyInput = {}, l2: Partial<L2> = {}) {
  let now = 1_000_000;
  const resolved = resolvePolicy(policy);
  const ctx: TableContext = {
    name: 't',
    fingerprint: '',
    epochs: new Epochs(async () => ({})),
    foreignRow() {},
    coalesces: resolved.coalescing !== 'none',
    policy: resolved,
    load: () => undefined,
    checkId: undefined,
    l2: l2 as L2,
    events: undefined,
    counters: newCounters(),
    metrics: { loadSeconds: { observe() {} }, waitSeconds: { observe() {} } },
    clock: new VersionClock(),
    admission: new Admission({
      maxLimit: resolved.maxConcurrentLoads,
      initialLimit: resolved.initialConcurrentLoads,
      maxQueueDelayMs: resolved.maxQueueDelayMs,
      maxQueued: resolved.maxQueuedLoads,
      maxOverdue: resolved.maxOverdueLoads,
    }),
    notFound: new NotFoundConfirmations(resolved.confirmNotFoundMs, () => now),
    log: pino({ level: 'silent' }),
    now: () => now,
  };
  return {
    ctx,
    l1: new L1(resolved.l1, 0),
    now: () => now,
    advance(ms: number) {
      now += ms;
    },
  };
}

/** Builds an owner over a fake runner; `runs` lists its flights in launch order. */
export function fakeOwner(policy: TablePolicyInput = {}, l2: Partial<L2> = {}) {
  const { ctx, l1, now, advance } = fakeContext(policy, l2);
  const runs: FakeRun[] = [];
  const owner = new TableOwner(ctx, l1, (_ctx, reports) => (flight) => {
    const done = deferred<Outcome>();
    runs.push({
      flight,
      land: (outcome) => done.resolve(outcome),
      fail: (error) => done.reject(error),
      serveStale: (envelope) => reports.serveStale(flight, envelope),
      loaded: (envelope) => reports.loaded(flight, envelope),
    });
    return done.promise;
  });
  /** Posts a fill and returns the caller's promise. */
  const fill = (id: string): Promise<ReadResult> =>
    new Promise((resolve, reject) => owner.post({ kind: 'miss', id, waiter: { resolve, reject } }));
  return {
    owner,
    ctx,
    l1,
    runs,
    fill,
    now,
    advance,
  };
}

/** Lets the mailbox drain (its handlers run on microtasks). */
export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await Promise.resolve();
  await new Promise((r) => setImmediate(r));
}
