/**
 * The value format, defined once: what a value key (`ecc:[<namespace>:]<table>:{<id>}`) holds, and how
 * TS and Lua read and write its header. Minting a row is `store/mint.ts`, the
 * version clock `store/version-clock.ts`, a loader's per-row policy
 * `store/load-result.ts`.
 *
 * A stored value is a fixed header and the value's JSON text:
 *
 *     E3|<version>|<softExpiresAt>|<hardExpiresAt>|<deltaMs>|<flags>|<born>|<fingerprint>|<tags>|<json>
 *
 * The six numeric fields are decimal digits. `flags` bit 1 is "negative" (not
 * found). `born` is when the data was read from the source (Valkey's clock,
 * µs, never later than the read): a purge at or after it covers the row.
 * `fingerprint` names the source that wrote the row (no `|`, may be empty);
 * `tags` are the row's purge tags, separated by one space (may be empty).
 * The header is found with `indexOf` here and `string.find` in Lua
 * ({@link LUA_ENVELOPE}), never by parsing the JSON or by a regex over its key
 * order. A value in any other format (`E2|…` of 0.1, the older `{"v":1,…}`
 * JSON envelope, a foreign string) is a miss: it is reloaded and overwritten,
 * never a crash.
 *
 * One clock for the fleet: a stored header's versions and expiries are on
 * Valkey's clock. The scripts write them from Valkey's `TIME` (an instance
 * sends only lifetimes, "fresh for 300 000 ms") and judge freshness against
 * it; an instance never compares its own wall clock with another host's. A
 * value read from Valkey is moved onto this process's monotonic clock with
 * what Valkey said remains ({@link localize}), so a host whose clock is off by
 * minutes neither reloads fresh values nor serves expired ones as fresh.
 */

/** The magic that starts every stored value of this format. */
export const ENVELOPE_MAGIC = 'E3|';

/** Flag bit: the source said "not found" (negative caching). */
const FLAG_NEGATIVE = 1;

/** Longest digit run of a header field: 2^53 has 16 digits. */
const MAX_FIELD_DIGITS = 16;

/**
 * A decoded envelope. `json` is the value's JSON text, kept so HTTP replies
 * need not re-serialise. Its expiries are on one clock: as stored (and as
 * {@link decodeEnvelope} returns them), Valkey's, in epoch milliseconds; in
 * L1 and in a flight, this process's monotonic clock (`TableContext.now`).
 */
export interface Envelope {
  /** The cached value; `null` for a negative (not-found) entry. */
  value: unknown;
  /** The value as JSON text (`"null"` for a negative entry). */
  json: string;
  /**
   * Orders writes of one id (newer wins): set by the script that wrote it, from
   * Valkey's clock (microseconds) and always above the key's previous version.
   */
  version: number;
  /** When the value goes stale (soft TTL), ms. */
  softExpiresAt: number;
  /**
   * When the value is gone (hard TTL: Valkey's `PX` ends here too), ms.
   * Between the two it may be served stale while one caller refreshes it
   * (stale-while-revalidate, stale-if-error).
   */
  hardExpiresAt: number;
  /** How long the load that produced it took, milliseconds (XFetch's delta). */
  deltaMs: number;
  /** True when the source said "not found" (negative caching). */
  negative: boolean;
  /**
   * When the data was read from the source, on Valkey's clock in µs, never later than that read
   * (for a PUT: when Valkey stored it). A purge whose epoch is at or after it covers the row.
   * Absent: 0, as old as can be (any purge of the row's tags or table covers it).
   */
  born?: number;
  /** The fingerprint of the source that wrote it (`TableOptions.fingerprint`); absent: `''`. */
  fingerprint?: string;
  /** The row's purge tags (see `store/tags.ts`); absent or empty: untagged. */
  tags?: readonly string[];
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
  const tags = env.tags === undefined ? '' : env.tags.join(' ');
  return `${ENVELOPE_MAGIC}${env.version}|${env.softExpiresAt}|${env.hardExpiresAt}|${env.deltaMs}|${flags}|${env.born ?? 0}|${env.fingerprint ?? ''}|${tags}|${env.json}`;
}

/** The header fields of a stored value; `end` is where the JSON starts. */
export interface EnvelopeHeader {
  version: number;
  softExpiresAt: number;
  hardExpiresAt: number;
  deltaMs: number;
  flags: number;
  born: number;
  fingerprint: string;
  /** The tags field as stored: tags separated by one space, `''` for none. */
  tags: string;
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
  for (let i = 0; i < 6; i++) {
    const bar = text.indexOf('|', at);
    if (bar <= at || bar - at > MAX_FIELD_DIGITS) return undefined;
    const n = digits(text, at, bar);
    if (n === undefined) return undefined;
    fields.push(n);
    at = bar + 1;
  }
  const fpEnd = text.indexOf('|', at);
  if (fpEnd < 0) return undefined;
  const tagsEnd = text.indexOf('|', fpEnd + 1);
  if (tagsEnd < 0) return undefined;
  const [version, softExpiresAt, hardExpiresAt, deltaMs, flags, born] = fields as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return {
    version,
    softExpiresAt,
    hardExpiresAt,
    deltaMs,
    flags,
    born,
    fingerprint: text.slice(at, fpEnd),
    tags: text.slice(fpEnd + 1, tagsEnd),
    end: tagsEnd + 1,
  };
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
  const envelope: Envelope = {
    value,
    json,
    version: h.version,
    softExpiresAt: h.softExpiresAt,
    hardExpiresAt: Math.max(h.hardExpiresAt, h.softExpiresAt),
    deltaMs: h.deltaMs,
    negative,
    born: h.born,
    fingerprint: h.fingerprint,
  };
  if (h.tags !== '') envelope.tags = h.tags.split(' ');
  return envelope;
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
 * An envelope read from Valkey, moved onto this process's clock: Valkey's
 * clock said `valkeyNowMs` when it answered, and `localNowMs` is this
 * process's clock when the command was sent, so the remaining lifetimes are
 * counted from a moment no later than Valkey's (never fresh for longer than
 * Valkey says).
 */
export function localize(stored: Envelope, valkeyNowMs: number, localNowMs: number): Envelope {
  const shift = localNowMs - valkeyNowMs;
  return {
    ...stored,
    softExpiresAt: stored.softExpiresAt + shift,
    hardExpiresAt: stored.hardExpiresAt + shift,
  };
}

/** `born` of a write whose data is Valkey's now (a PUT, a tombstone): the script stamps its own clock. */
export const BORN_NOW = -1;

/**
 * What a script needs to write `envelope` at `now` (this process's clock):
 * its remaining lifetimes, not its expiry instants, which the script sets on
 * Valkey's clock. `[softInMs, hardInMs, deltaMs, flags, born, fingerprint, tags, json]`;
 * `born` is {@link BORN_NOW} for "Valkey's now".
 */
export function writeArgs(
  envelope: Envelope,
  now: number,
): [number, number, number, number, string, string, string, string] {
  const softInMs = Math.max(0, Math.round(envelope.softExpiresAt - now));
  const hardInMs = Math.max(softInMs, Math.round(envelope.hardExpiresAt - now));
  const born = envelope.born ?? 0;
  return [
    softInMs,
    hardInMs,
    envelope.deltaMs,
    envelope.negative ? FLAG_NEGATIVE : 0,
    born === BORN_NOW ? 'now' : String(Math.max(0, Math.floor(born))),
    envelope.fingerprint ?? '',
    envelope.tags === undefined ? '' : envelope.tags.join(' '),
    envelope.json,
  ];
}

/**
 * The same format for the Lua scripts, prepended to each of them:
 * - `getv(k)`: the key's string, or false when absent or of another type
 *   (WRONGTYPE is garbage to overwrite, not an error);
 * - `header(v)`: `version, softExpiresAt, hardExpiresAt, fingerprint`, or nil
 *   when `v` is not of this format;
 * - `mark(v)`: as {@link readMark};
 * - `clock()`: Valkey's time, in ms and in µs since the epoch (`TIME`);
 * - `stored(cur, nowus, softIn, hardIn, delta, flags, born, fp, tags, json, nowms, at)`:
 *   the text to store, its version above `cur` (the key's version) and at least
 *   `at` (absent: Valkey's µs clock), so the order of versions is the order Valkey
 *   applied the writes, its expiries `softIn`/`hardIn` ms from Valkey's now, and `born`
 *   as given (`now`: Valkey's µs clock). Returns text, version. A fill passes `at`: the
 *   version its holder already answered with (see `fillAndRelease` in `lua.ts`).
 */
export const LUA_ENVELOPE = `
local function getv(k)
  local v = redis.pcall('GET', k)
  if type(v) ~= 'string' then return false end
  return v
end
local function header(v)
  if not v then return nil end
  local s, e, ver, soft, hard, born, fp = string.find(v, '^E3|(%d+)|(%d+)|(%d+)|%d+|%d+|(%d+)|([^|]*)|[^|]*|')
  if not s or #ver > 16 or #soft > 16 or #hard > 16 or #born > 16 then return nil end
  local n = tonumber(ver)
  if n >= 9007199254740992 then return nil end
  return n, tonumber(soft), tonumber(hard), fp
end
local function mark(v)
  if not v then return '' end
  local n = header(v)
  if not n then return '*' end
  return string.format('%.0f', n)
end
local function clock()
  local t = redis.call('TIME')
  local sec, us = tonumber(t[1]), tonumber(t[2])
  return sec * 1000 + math.floor(us / 1000), sec * 1000000 + us
end
local function stored(cur, nowus, softIn, hardIn, delta, flags, born, fp, tags, json, nowms, at)
  local v = at or nowus
  if cur and cur >= v then v = cur + 1 end
  local f = function(n) return string.format('%.0f', n) end
  if born == 'now' then born = f(nowus) end
  return 'E3|' .. f(v) .. '|' .. f(nowms + tonumber(softIn)) .. '|' .. f(nowms + tonumber(hardIn))
    .. '|' .. delta .. '|' .. flags .. '|' .. born .. '|' .. fp .. '|' .. tags .. '|' .. json, v
end
`;
