/**
 * How a flight runs, outside the owner: with the fleet lease (`readOrLease`,
 * wait for the holder's fill or take over, `fillAndRelease`), plain
 * cache-aside with a compare-and-set fill, or — while Valkey is unusable —
 * straight from the source. Every path ends in one {@link Outcome}.
 */
import { WaitTimeoutError } from '../errors.js';
import { type Envelope, encodeEnvelope } from './envelope.js';
import { encodeEvent } from './events.js';
import {
  decode,
  eventTarget,
  type Flight,
  type FlightContext,
  isReplyError,
  type Outcome,
  servableStale,
  serveStale,
  valueOutcome,
} from './flight.js';
import { eventsChannel, leaseKey, valueKey } from './keys.js';
import { type LeaseAnswer, readMark } from './lease.js';
import { asStoreError, hardTtlMs, loadEnvelope } from './loader.js';

/** Longest pause between two looks at a contended lease when no event wakes the waiter. */
const POLL_MS = 250;
/** Shortest such pause: a lease about to expire is looked at again, but never in a tight loop. */
const MIN_POLL_MS = 10;

/**
 * Runs a flight: with the fleet lease (`coalescing: 'fleet'`), plain
 * cache-aside (GET, load on a miss, compare-and-set fill), or — while Valkey is
 * unusable — straight from the source. Never rejects: every failure becomes an
 * error outcome, so every waiter is settled.
 */
export async function fly(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  try {
    if (!ctx.health.usable()) return await loadDegraded(ctx, flight, undefined);
    return ctx.policy.coalescing === 'fleet'
      ? await flyLeased(ctx, flight)
      : await flyPlain(ctx, flight);
  } catch (err) {
    return { kind: 'error', error: asStoreError(err, ctx.table, flight.id), loaded: flight.loaded };
  }
}

async function flyPlain(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  let text: string | null;
  try {
    text = await ctx.valkey.get(valueKey(ctx.table, flight.id));
    ctx.health.succeeded();
  } catch (err) {
    // A key of another type is garbage to overwrite, not a sick server.
    if (!isReplyError(err)) return loadDegraded(ctx, flight, err);
    ctx.metrics.badEnvelopes.inc();
    text = null;
  }
  const cached = text === null ? undefined : decode(ctx, text);
  if (
    cached !== undefined &&
    cached.softExpiresAt > Date.now() &&
    cached.version > flight.replaceVersion
  )
    return valueOutcome(flight, cached, 'l2');
  if (cached !== undefined && servableStale(cached)) serveStale(ctx, flight, cached);
  const loaded = await loadEnvelope(ctx, flight);
  const version = await fillWithoutLease(ctx, flight, loaded, readMark(text));
  const envelope = version === undefined ? loaded : { ...loaded, version };
  return {
    kind: 'value',
    envelope,
    source: 'source',
    loaded: flight.loaded,
    refused: version === undefined,
  };
}

/**
 * Valkey failed (`err`) or the circuit is open (`err` undefined): load from the
 * source without the lease. The fill is sent without waiting for it, and only
 * as "set if absent", so it can never overwrite a write that Valkey holds but
 * this instance could not see; a lease a late script may still take expires
 * after `leaseMs`.
 */
async function loadDegraded(ctx: FlightContext, flight: Flight, err: unknown): Promise<Outcome> {
  if (err !== undefined) {
    ctx.health.failed(err);
    ctx.metrics.valkeyErrors(ctx.policy.coalescing === 'fleet' ? 'lease' : 'get').inc();
    ctx.log.debug({ err, table: ctx.table }, 'valkey read failed; loading from the source');
  }
  const envelope = await loadEnvelope(ctx, flight);
  if (ctx.health.usable()) void fillWithoutLease(ctx, flight, envelope, '');
  return valueOutcome(flight, envelope, 'source');
}

/**
 * Writes a fill with `fillIfUnchanged`.
 *
 * @returns the version Valkey wrote it at, or undefined when it was refused or
 *   failed (failures are counted, never thrown).
 */
async function fillWithoutLease(
  ctx: FlightContext,
  flight: Flight,
  envelope: Envelope,
  expected: string,
): Promise<number | undefined> {
  if (flight.superseded) return undefined;
  try {
    const version = await ctx.lease.fillIfUnchanged(
      valueKey(ctx.table, flight.id),
      expected,
      encodeEnvelope(envelope),
      hardTtlMs(envelope, Date.now()),
      eventTarget(ctx, flight.id),
    );
    ctx.health.succeeded();
    if (version !== undefined) ctx.clock.observe(version);
    return version;
  } catch (err) {
    ctx.health.failed(err);
    ctx.metrics.valkeyErrors('set').inc();
    ctx.log.debug({ err, table: ctx.table }, 'valkey fill failed; answering without L2');
    return undefined;
  }
}

/**
 * The fleet path: `readOrLease` until there is a value or this flight holds
 * the lease. A contended flight waits for the holder's fill — woken by its
 * PUBLISH, re-checking at least every {@link POLL_MS} and right when the lease
 * expires (so exactly one waiter takes over a dead holder's lease) — never
 * past `waitTimeoutMs`.
 */
async function flyLeased(ctx: FlightContext, flight: Flight): Promise<Outcome> {
  const { table, policy, metrics } = ctx;
  const vKey = valueKey(table, flight.id);
  const lKey = leaseKey(table, flight.id);
  const watch = ctx.events?.watch(table, flight.id);
  const deadline = Date.now() + policy.waitTimeoutMs;
  let waitStarted: number | undefined;
  // An early refresh must replace the version it was asked about, even while that is fresh.
  let replaceUpTo = flight.replaceVersion;
  const waited = () => {
    if (waitStarted !== undefined)
      metrics.waitSeconds.observe((performance.now() - waitStarted) / 1000);
  };
  try {
    for (;;) {
      let answer: LeaseAnswer;
      try {
        answer = await ctx.lease.readOrLease(vKey, lKey, policy.leaseMs, Date.now(), replaceUpTo);
        ctx.health.succeeded();
      } catch (err) {
        return await loadDegraded(ctx, flight, err);
      }
      if (answer.kind === 'value') {
        const envelope = decode(ctx, answer.text);
        if (envelope !== undefined) {
          waited();
          return valueOutcome(flight, envelope, 'l2');
        }
        // Its header looked fresh but it does not decode: compete for the lease to overwrite it.
        replaceUpTo = Number.MAX_SAFE_INTEGER;
        continue;
      }
      const stale = answer.stale === undefined ? undefined : decode(ctx, answer.stale);
      if (answer.kind === 'leased') {
        metrics.lease(waitStarted === undefined ? 'acquired' : 'takeover').inc();
        waited();
        if (stale !== undefined && servableStale(stale)) serveStale(ctx, flight, stale);
        return await loadAndFill(ctx, flight, vKey, lKey, answer.token);
      }
      // Contended: another instance loads. A refresh has nothing to wait for, and a
      // reader with a stale value in hand is answered with it (stale-while-revalidate).
      // (Waiters may have attached to a refresh since it started: then it waits like any flight.)
      if (flight.waiters.length === 0) {
        return { kind: 'skipped', loaded: false, retryAfterMs: answer.remainingMs };
      }
      if (stale !== undefined && servableStale(stale)) {
        waited();
        return valueOutcome(flight, stale, 'l2');
      }
      if (waitStarted === undefined) {
        waitStarted = performance.now();
        metrics.lease('contended').inc();
      }
      const leftMs = deadline - Date.now();
      if (leftMs <= 0) {
        waited();
        throw new WaitTimeoutError(
          `no fill from the lease holder within ${policy.waitTimeoutMs} ms`,
          {
            table,
            id: flight.id,
          },
        );
      }
      const pauseMs = Math.min(leftMs, Math.max(MIN_POLL_MS, answer.remainingMs + 2), POLL_MS);
      if (watch !== undefined) await watch.wait(pauseMs);
      else await new Promise((r) => setTimeout(r, pauseMs));
    }
  } finally {
    watch?.close();
  }
}

/** Holding the lease: load, then `fillAndRelease`; on a failed load, release the lease and wake the waiters. */
async function loadAndFill(
  ctx: FlightContext,
  flight: Flight,
  vKey: string,
  lKey: string,
  token: string,
): Promise<Outcome> {
  const { metrics, table } = ctx;
  let envelope: Envelope;
  try {
    envelope = await loadEnvelope(ctx, flight);
  } catch (err) {
    releaseLease(ctx, lKey, token, flight.id);
    throw err;
  }
  if (flight.superseded) {
    releaseLease(ctx, lKey, token, flight.id);
    return valueOutcome(flight, envelope, 'source');
  }
  let refused = false;
  try {
    const version = await ctx.lease.fillAndRelease(
      vKey,
      lKey,
      token,
      encodeEnvelope(envelope),
      hardTtlMs(envelope, Date.now()),
      eventTarget(ctx, flight.id),
    );
    ctx.health.succeeded();
    if (version === undefined) {
      refused = true;
      metrics.lease('lost').inc();
    } else {
      // Valkey may have ordered it above a newer version it held: answer what it stored.
      envelope = { ...envelope, version };
      ctx.clock.observe(version);
    }
  } catch (err) {
    ctx.health.failed(err);
    metrics.valkeyErrors('fill').inc();
    ctx.log.debug({ err, table }, 'valkey fill failed; answering without L2');
  }
  return { kind: 'value', envelope, source: 'source', loaded: flight.loaded, refused };
}

function releaseLease(ctx: FlightContext, lKey: string, token: string, id: string): void {
  const channel = eventsChannel(ctx.table);
  ctx.lease
    .release(lKey, token, channel, encodeEvent({ k: 'release', id }))
    .catch((err: unknown) => {
      ctx.metrics.valkeyErrors('release').inc();
      ctx.log.debug(
        { err, table: ctx.table },
        'valkey lease release failed; it expires after leaseMs',
      );
    });
}
