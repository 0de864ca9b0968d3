/**
 * The L2 envelope: what `ecc:<table>:{<id>}` holds.
 *
 * `{ v: 1, version, softExpiresAt, hardExpiresAt, deltaMs, negative?, value }`. A string that
 * does not decode, or carries another `v`, is treated as a miss and
 * overwritten by the next fill — never a crash.
 */

/** Envelope format version written by this code. */
export const ENVELOPE_VERSION = 1;

/** A decoded envelope. `json` is the value's JSON text, kept so HTTP replies need not re-serialise. */
export interface Envelope {
  /** The cached value; `null` for a negative (not-found) entry. */
  value: unknown;
  /** The value as JSON text (`"null"` for a negative entry). */
  json: string;
  /** Mint-time version: orders writes of one id (newer wins). */
  version: number;
  /** When the value goes stale, epoch milliseconds (soft TTL). */
  softExpiresAt: number;
  /**
   * When the value is gone, epoch milliseconds (hard TTL: Valkey's `PX` ends
   * here too). Between the two it may be served stale while one caller
   * refreshes it. Envelopes written without it have no stale window.
   */
  hardExpiresAt: number;
  /** How long the load that produced it took, milliseconds (XFetch's delta). */
  deltaMs: number;
  /** True when the source said "not found" (negative caching). */
  negative: boolean;
}

/**
 * Serialises a value to JSON for storage.
 *
 * @returns the JSON text, or `undefined` when the value cannot be stored
 *   (BigInt, cycles, a function or `undefined` at top level).
 */
export function toJson(value: unknown): string | undefined {
  try {
    const json = JSON.stringify(value);
    return typeof json === 'string' ? json : undefined;
  } catch {
    return undefined;
  }
}

/** Builds the envelope text around an already-serialised value (no second `stringify` of the value). */
export function encodeEnvelope(env: Envelope): string {
  const neg = env.negative ? ',"negative":true' : '';
  // Field order matters: the lease script reads `version` and `softExpiresAt` from this prefix.
  return `{"v":${ENVELOPE_VERSION},"version":${env.version},"softExpiresAt":${env.softExpiresAt},"hardExpiresAt":${env.hardExpiresAt},"deltaMs":${env.deltaMs}${neg},"value":${env.json}}`;
}

/**
 * Decodes an envelope read from L2.
 *
 * @returns the envelope, or `undefined` when the text is not a valid v1 envelope.
 */
export function decodeEnvelope(text: string): Envelope | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof raw !== 'object' || raw === null) return undefined;
  const r = raw as Record<string, unknown>;
  if (r.v !== ENVELOPE_VERSION || !('value' in r)) return undefined;
  if (
    !isNonNegativeInteger(r.version) ||
    !isNonNegativeInteger(r.softExpiresAt) ||
    !isNonNegativeInteger(r.deltaMs)
  ) {
    return undefined;
  }
  // Re-serialising can fail on a value nested beyond the stack (a planted or
  // foreign envelope): that is an undecodable envelope, i.e. a miss.
  const json = toJson(r.value);
  if (json === undefined) return undefined;
  const hard = isNonNegativeInteger(r.hardExpiresAt) ? r.hardExpiresAt : r.softExpiresAt;
  return {
    value: r.value,
    json,
    version: r.version,
    softExpiresAt: r.softExpiresAt,
    hardExpiresAt: Math.max(hard, r.softExpiresAt),
    deltaMs: r.deltaMs,
    negative: r.negative === true,
  };
}

function isNonNegativeInteger(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
}

/** Mints and observes versions; see {@link createVersionClock}. */
export interface VersionClock {
  /** A version greater than every version minted or observed so far. */
  mint(): number;
  /** Takes note of a version read from L2 (written by another instance). */
  observe(version: number): void;
}

/** How far ahead of this machine's clock an observed version may be and still move the clock. */
const MAX_SKEW_MS = 60_000;

/**
 * A hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", OPODIS
 * 2014) for envelope versions: epoch milliseconds × 1000, but never below one
 * more than the greatest version minted or observed. So a write always orders
 * after every value this instance has seen, even when another instance's clock
 * runs ahead; observations more than a minute ahead are ignored, so a planted
 * version cannot push the clock toward 2^53. Stays below 2^53 until 2255.
 */
export function createVersionClock(now: () => number = Date.now): VersionClock {
  let last = 0;
  return {
    mint() {
      const v = Math.max(now() * 1000, last + 1);
      last = v;
      return v;
    },
    observe(version) {
      if (version > last && version <= (now() + MAX_SKEW_MS) * 1000) last = version;
    },
  };
}
