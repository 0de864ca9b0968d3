/**
 * Minting a row: its lifetimes with jitter, its hard TTL, and the tombstone a
 * DELETE writes.
 */
import type { Envelope } from '../l2/format.js';

/** The lifetimes a row is minted with, before jitter. */
export interface Lifetimes {
  /** Soft TTL, ms. */
  ttlMs: number;
  /** Stale window after the soft TTL, ms (hard TTL = ttlMs + staleMs). */
  staleMs: number;
  /** `ttlMs` and `staleMs` are multiplied by one uniform(1, 1 + jitter) factor. */
  jitter: number;
}

/**
 * An envelope minted at `now`: soft = now + ttlMs·f, hard = soft + staleMs·f,
 * with one jitter factor f = uniform(1, 1 + jitter), so keys written together
 * do not expire together.
 */
export function mintEnvelope(
  row: { value: unknown; json: string; version: number; deltaMs: number; negative: boolean },
  life: Lifetimes,
  now: number,
  random: () => number = Math.random,
): Envelope {
  const f = 1 + random() * life.jitter;
  const softExpiresAt = now + Math.max(1, Math.round(life.ttlMs * f));
  return { ...row, softExpiresAt, hardExpiresAt: softExpiresAt + Math.round(life.staleMs * f) };
}

/** The hard TTL (Valkey `PX`) of an envelope from `now`, at least 1 ms. */
export function hardTtlMs(envelope: Envelope, now: number): number {
  return Math.max(1, envelope.hardExpiresAt - now);
}

/**
 * A tombstone: "not found", never fresh. Written by a DELETE with a version
 * above the deleted value's, so a fill that read the old value (or a
 * lease-less fill expecting an empty key) cannot bring it back.
 */
export function tombstone(now: number): Envelope {
  return {
    value: null,
    json: 'null',
    version: 0,
    softExpiresAt: now,
    hardExpiresAt: now,
    deltaMs: 0,
    negative: true,
  };
}
