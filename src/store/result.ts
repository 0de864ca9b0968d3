import type { Envelope } from './envelope.js';
import type { ReadResult, ReadSource } from './types.js';

/** Builds the answer a caller receives from an envelope and the layer that produced it. */
export function resultOf(
  envelope: Envelope,
  source: ReadSource,
  coalesced: boolean,
  now: number,
): ReadResult {
  const ttlMs = Math.max(0, envelope.softExpiresAt - now);
  if (envelope.negative) {
    return { found: false, source, coalesced, version: envelope.version, ttlMs };
  }
  return {
    found: true,
    value: envelope.value,
    json: envelope.json,
    source,
    coalesced,
    version: envelope.version,
    ttlMs,
  };
}
