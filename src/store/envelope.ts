/**
 * The value format, defined once: what `ecc:<table>:{<id>}` holds, how TS and
 * Lua read its header, how a row's lifetimes are minted (jitter, per-row
 * policy), and the version clock that orders writes.
 *
 * A stored value is a fixed header and the value's JSON text:
 *
 *     E2|<version>|<softExpiresAt>|<hardExpiresAt>|<deltaMs>|<flags>|<json>
 *
 * Every header field is decimal digits. `flags` bit 1 is "negative" (not
 * found). The header is found with `indexOf` here and `string.find` in Lua
 * ({@link LUA_ENVELOPE}), never by parsing the JSON or by a regex over its key
 * order. A value in any other format (the older `{"v":1,…}` JSON envelope, a
 * foreign string) is a miss: it is reloaded and overwritten, never a crash.
 */

/** The magic that starts every stored value of this format. */
export const ENVELOPE_MAGIC = 'E2|';

/** Flag bit: the source said "not found" (negative caching). */
const FLAG_NEGATIVE = 1;

/** Longest digit run of a header field: 2^53 has 16 digits. */
const MAX_FIELD_DIGITS = 16;

/** A decoded envelope. `json` is the value's JSON text, kept so HTTP replies need not re-serialise. */
export interface Envelope {
  /** The cached value; `null` for a negative (not-found) entry. */
  value: unknown;
  /** The value as JSON text (`"null"` for a negative entry). */
  json: string;
  /** Orders writes of one id (newer wins); raised by Valkey above the key's current version. */
  version: number;
  /** When the value goes stale, epoch milliseconds (soft TTL). */
  softExpiresAt: number;
  /**
   * When the value is gone, epoch milliseconds (hard TTL: Valkey's `PX` ends
   * here too). Between the two it may be served stale while one caller
   * refreshes it (stale-while-revalidate, stale-if-error).
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
 *   (BigInt, cycles, nesting beyond the stack, a function or `undefined` at top level).
 */
export function toJson(value: unknown): string | undefined {
  try {
    const json = JSON.stringify(value);
    return typeof json === 'string' ? json : undefined;
  } catch {
    return undefined;
  }
}

/** The stored text of an envelope: header, then the already-serialised value (no second `stringify`). */
export function encodeEnvelope(env: Envelope): string {
  const flags = env.negative ? FLAG_NEGATIVE : 0;
  return `${ENVELOPE_MAGIC}${env.version}|${env.softExpiresAt}|${env.hardExpiresAt}|${env.deltaMs}|${flags}|${env.json}`;
}

/** The header fields of a stored value; `end` is where the JSON starts. */
export interface EnvelopeHeader {
  version: number;
  softExpiresAt: number;
  hardExpiresAt: number;
  deltaMs: number;
  flags: number;
  end: number;
}

/**
 * Reads the header of a stored value, without touching the JSON after it.
 *
 * @returns the fields, or `undefined` when `text` is not of this format (or a
 *   field is not a safe integer).
 */
export function decodeHeader(text: string): EnvelopeHeader | undefined {
  if (!text.startsWith(ENVELOPE_MAGIC)) return undefined;
  const fields: number[] = [];
  let at = ENVELOPE_MAGIC.length;
  for (let i = 0; i < 5; i++) {
    const bar = text.indexOf('|', at);
    if (bar <= at || bar - at > MAX_FIELD_DIGITS) return undefined;
    const n = digits(text, at, bar);
    if (n === undefined) return undefined;
    fields.push(n);
    at = bar + 1;
  }
  const [version, softExpiresAt, hardExpiresAt, deltaMs, flags] = fields as [
    number,
    number,
    number,
    number,
    number,
  ];
  return { version, softExpiresAt, hardExpiresAt, deltaMs, flags, end: at };
}

/** The safe integer spelled by `text[from, to)`, or undefined when it is not all decimal digits. */
function digits(text: string, from: number, to: number): number | undefined {
  let n = 0;
  for (let i = from; i < to; i++) {
    const d = text.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return undefined;
    n = n * 10 + d;
  }
  return Number.isSafeInteger(n) ? n : undefined;
}

/**
 * Decodes a stored value.
 *
 * @returns the envelope, or `undefined` when the text is not of this format, or
 *   its JSON does not parse (or cannot be re-serialised: nested beyond the stack).
 */
export function decodeEnvelope(text: string): Envelope | undefined {
  const h = decodeHeader(text);
  if (h === undefined) return undefined;
  let json = text.slice(h.end);
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return undefined;
  }
  const negative = (h.flags & FLAG_NEGATIVE) !== 0;
  if (negative) {
    value = null;
    json = 'null';
  }
  return {
    value,
    json,
    version: h.version,
    softExpiresAt: h.softExpiresAt,
    hardExpiresAt: Math.max(h.hardExpiresAt, h.softExpiresAt),
    deltaMs: h.deltaMs,
    negative,
  };
}

/**
 * What a flight read from L2, for a fill without the lease (compare-and-set):
 * `""` absent, `"*"` present but not of this format, else the version digits.
 * Lua computes the same mark with `mark()` of {@link LUA_ENVELOPE}.
 */
export function readMark(text: string | null | undefined): string {
  if (text === null || text === undefined) return '';
  const h = decodeHeader(text);
  return h === undefined ? '*' : String(h.version);
}

/**
 * The same format for the Lua scripts, prepended to each of them:
 * - `getv(k)`: the key's string, or false when absent or of another type
 *   (WRONGTYPE is garbage to overwrite, not an error);
 * - `header(v)`: `version, softExpiresAt, hardExpiresAt, verEnd` (the index of
 *   the version's last digit), or nil when `v` is not of this format;
 * - `mark(v)`: as {@link readMark};
 * - `stamp(env, cur)`: raises `env`'s version above `cur` (the key's current
 *   one), so the order of versions is the order Valkey applied the writes.
 */
export const LUA_ENVELOPE = `
local function getv(k)
  local v = redis.pcall('GET', k)
  if type(v) ~= 'string' then return false end
  return v
end
local function header(v)
  if not v then return nil end
  local s, e, ver, soft, hard = string.find(v, '^E2|(%d+)|(%d+)|(%d+)|%d+|%d+|')
  if not s or #ver > 16 or #soft > 16 or #hard > 16 then return nil end
  local n = tonumber(ver)
  if n >= 9007199254740992 then return nil end
  return n, tonumber(soft), tonumber(hard), 3 + #ver
end
local function mark(v)
  if not v then return '' end
  local n = header(v)
  if not n then return '*' end
  return string.format('%.0f', n)
end
local function stamp(env, cur)
  local mine, _, _, verEnd = header(env)
  if cur and cur >= mine then
    mine = cur + 1
    env = 'E2|' .. string.format('%.0f', mine) .. string.sub(env, verEnd + 1)
  end
  return env, mine
end
`;

/** Per-row overrides of the table's freshness policy, returned by a loader via {@link withPolicy}. */
export interface RowPolicy {
  /** Soft TTL of this row, ms (default: the table's `ttlMs`, or `negativeTtlMs` for not-found). */
  ttlMs?: number;
  /** Stale window of this row, ms (default: the table's `staleMs`; always 0 for not-found). */
  staleMs?: number;
  /** Cache this row as "not found" (negative caching). */
  negative?: boolean;
}

/** A loader's answer with its own policy; build it with {@link withPolicy}. */
export class LoadResult {
  readonly value: unknown;
  readonly policy: RowPolicy;

  constructor(value: unknown, policy: RowPolicy) {
    this.value = value;
    this.policy = policy;
  }
}

/**
 * Lets a loader set the policy of one row, e.g. an origin's `Cache-Control: max-age`:
 * `return withPolicy(row, { ttlMs: 5_000 })`, or `withPolicy(undefined, { ttlMs: 1_000 })`
 * for a short-lived "not found".
 *
 * @throws {TypeError} when a duration is not a non-negative integer (ttlMs at least 1).
 */
export function withPolicy(value: unknown, policy: RowPolicy): LoadResult {
  const { ttlMs, staleMs } = policy;
  if (ttlMs !== undefined && !(Number.isSafeInteger(ttlMs) && ttlMs >= 1)) {
    throw new TypeError('withPolicy: ttlMs must be an integer >= 1 (milliseconds)');
  }
  if (staleMs !== undefined && !(Number.isSafeInteger(staleMs) && staleMs >= 0)) {
    throw new TypeError('withPolicy: staleMs must be an integer >= 0 (milliseconds)');
  }
  return new LoadResult(value, { ...policy });
}

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
 * A tombstone: "not found", never fresh, carrying a deletion's version, so a
 * fill that read the old value (or a lease-less fill expecting an empty key)
 * cannot bring the deleted value back.
 */
export function tombstone(version: number): Envelope {
  return {
    value: null,
    json: 'null',
    version,
    softExpiresAt: 0,
    hardExpiresAt: 0,
    deltaMs: 0,
    negative: true,
  };
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
