/**
 * The Valkey side of writes, run outside the owner: a PUT and a DELETE, each
 * one script that orders the write after whatever the key holds (its version
 * is raised above the current one), cancels any lease, and publishes the
 * change for the other instances' L1s.
 */
import { type Envelope, encodeEnvelope } from './envelope.js';
import { eventTarget, type FlightContext } from './flight.js';
import { leaseKey, valueKey } from './keys.js';
import { hardTtlMs, makeEnvelope } from './loader.js';

/** How long a DELETE's tombstone outlives the lease: a write queued on a slow connection lands before it expires. */
const TOMBSTONE_EXTRA_MS = 60_000;

/**
 * Mints a version and an envelope for `value` (the table's TTLs, jittered) and
 * sends it. Cancelling the lease refuses any fill already in flight anywhere
 * in the fleet.
 *
 * @returns the envelope, and `sent`, which resolves with the version Valkey
 *   ordered the write at (at least the envelope's) or rejects with the Valkey error.
 */
export function sendPut(
  ctx: FlightContext,
  id: string,
  value: unknown,
  json: string,
): { envelope: Envelope; sent: Promise<number> } {
  const { policy, table } = ctx;
  const envelope = makeEnvelope(
    ctx.clock.mint(),
    value,
    json,
    policy.ttlMs,
    policy.staleMs,
    0,
    false,
    policy,
  );
  const sent = ctx.lease.write(
    valueKey(table, id),
    leaseKey(table, id),
    encodeEnvelope(envelope),
    hardTtlMs(envelope, Date.now()),
    eventTarget(ctx, id),
    'put',
  );
  return { envelope, sent };
}

/**
 * Replaces the value with a tombstone (a "not found" envelope that is never
 * fresh, kept `leaseMs` + 60 s) and deletes the lease. The tombstone carries
 * the deletion's version, so a fill that read the old value, or a degraded
 * fill that expects an empty key, cannot bring the deleted value back.
 *
 * @returns the version Valkey ordered the deletion at, or rejects with the Valkey error.
 */
export function sendInvalidate(ctx: FlightContext, id: string): Promise<number> {
  const { policy, table } = ctx;
  const tombstone: Envelope = {
    value: null,
    json: 'null',
    version: ctx.clock.mint(),
    softExpiresAt: 0,
    hardExpiresAt: 0,
    deltaMs: 0,
    negative: true,
  };
  return ctx.lease.write(
    valueKey(table, id),
    leaseKey(table, id),
    encodeEnvelope(tombstone),
    policy.leaseMs + TOMBSTONE_EXTRA_MS,
    eventTarget(ctx, id),
    'del',
  );
}
