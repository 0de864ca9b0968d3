/**
 * The L2 envelope: what `ecc:<table>:{<id>}` holds.
 *
 * `{ v: 1, value, version, softExpiresAt, deltaMs, negative? }`. A string that
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
  return `{"v":${ENVELOPE_VERSION},"version":${env.version},"softExpiresAt":${env.softExpiresAt},"deltaMs":${env.deltaMs}${neg},"value":${env.json}}`;
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
    !isFiniteNumber(r.version) ||
    !isFiniteNumber(r.softExpiresAt) ||
    !isFiniteNumber(r.deltaMs)
  ) {
    return undefined;
  }
  return {
    value: r.value,
    json: JSON.stringify(r.value),
    version: r.version,
    softExpiresAt: r.softExpiresAt,
    deltaMs: r.deltaMs,
    negative: r.negative === true,
  };
}

function isFiniteNumber(x: unknown): x is number {
  return typeof x === 'number' && Number.isFinite(x);
}

/**
 * Mints versions for one store: epoch milliseconds × 1000 plus a counter, so
 * versions from one process are strictly increasing and versions from
 * different processes order by wall-clock time. Stays below 2^53 until 2255.
 */
export function createVersionClock(now: () => number = Date.now): () => number {
  let last = 0;
  return () => {
    const v = Math.max(now() * 1000, last + 1);
    last = v;
    return v;
  };
}
