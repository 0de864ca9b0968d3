/**
 * The Valkey side of writes, run outside the owner: a PUT (`writeAndCancel`)
 * and a DELETE (`invalidate`), each one script that also cancels any lease and
 * publishes the change for the other instances' L1s.
 */
import { type Envelope, encodeEnvelope } from './envelope.js';
import { encodeEvent } from './events.js';
import type { FlightContext } from './flight.js';
import { eventsChannel, leaseKey, valueKey } from './keys.js';
import { hardTtlMs, makeEnvelope } from './loader.js';

/**
 * Mints a version and an envelope for `value` (the table's TTLs, jittered) and
 * sends it. Cancelling the lease refuses any fill already in flight anywhere
 * in the fleet.
 *
 * @returns the envelope, and `sent`, which rejects with the Valkey error.
 */
export function sendPut(
  ctx: FlightContext,
  id: string,
  value: unknown,
  json: string,
): { envelope: Envelope; sent: Promise<void> } {
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
  const sent = ctx.lease.writeAndCancel(
    valueKey(table, id),
    leaseKey(table, id),
    encodeEnvelope(envelope),
    hardTtlMs(envelope, Date.now()),
    eventsChannel(table),
    encodeEvent({ k: 'put', id, v: envelope.version }),
  );
  return { envelope, sent };
}

/**
 * Deletes the value and its lease, and publishes a deletion versioned like a
 * write, so other instances drop any older row (newer-wins).
 *
 * @returns a promise that rejects with the Valkey error.
 */
export function sendInvalidate(ctx: FlightContext, id: string): Promise<void> {
  const { table } = ctx;
  const message = encodeEvent({ k: 'del', id, v: ctx.clock.mint() });
  return ctx.lease.invalidate(
    valueKey(table, id),
    leaseKey(table, id),
    eventsChannel(table),
    message,
  );
}
