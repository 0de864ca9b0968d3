/**
 * The fleet lease and the ordered writes: Lua scripts that admit one loader
 * per key across every instance (after the leases of memcache, Nishtala et
 * al., "Scaling Memcache at Facebook", NSDI 2013) and let Valkey, not the
 * instances' clocks, order every write of a key. Value and lease keys share the
 * hash tag `{<id>}`, so each script touches one cluster slot.
 *
 * Plain Lua run with EVALSHA (ioredis `defineCommand`): Redis 7.0 and every
 * Valkey. A cold fill costs two round trips (`readOrLease`, `fillAndRelease`);
 * an L2 hit costs one.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';

// Shared helpers, prepended to every script.
// - getv: the value, or false when absent or not a string (WRONGTYPE is garbage, not an error).
// - ver: the envelope's version, or nil when it has none below 2^53 (garbage).
// - stamp: raises the envelope's version above the current one, so the order
//   of versions is the order in which Valkey applied the writes.
// - event: the coherence message `{ k, id, v }` (id already JSON-encoded).
const PRELUDE = `
local function getv(k)
  local v = redis.pcall('GET', k)
  if type(v) ~= 'string' then return false end
  return v
end
local function ver(v)
  if not v then return nil end
  local d = string.match(v, '^{"v":1,"version":(%d+),')
  if not d or #d > 16 then return nil end
  local n = tonumber(d)
  if n >= 9007199254740992 then return nil end
  return n
end
local function stamp(env, cur)
  local mine = ver(env)
  if cur and cur >= mine then
    mine = cur + 1
    env = string.gsub(env, '^{"v":1,"version":%d+,', '{"v":1,"version":' .. string.format('%.0f', mine) .. ',', 1)
  end
  return env, mine
end
local function event(kind, idjson, v)
  return '{"k":"' .. kind .. '","id":' .. idjson .. ',"v":' .. string.format('%.0f', v) .. '}'
end
`;

// KEYS: value, lease. ARGV: token, leaseMs, nowMs, replaceUpTo.
// Fresh (its header says softExpiresAt > now, and its version is above
// replaceUpTo) → the value. Anything else (absent, stale, foreign, garbage, of
// another type) needs a load, so the caller competes for the lease. A lease
// without an expiry (or of another type) is broken: it is taken over at once.
const READ_OR_LEASE = `${PRELUDE}
local v = getv(KEYS[1])
if v then
  local soft = string.match(v, '^{"v":1,"version":%d+,"softExpiresAt":(%d+),')
  local n = ver(v)
  if n and soft and tonumber(soft) > tonumber(ARGV[3]) and n > tonumber(ARGV[4]) then
    return {1, v}
  end
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2, v} end
local ttl = redis.call('PTTL', KEYS[2])
if ttl < 0 then
  redis.call('DEL', KEYS[2])
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  return {2, v}
end
return {3, ttl, v}
`;

// KEYS: value, lease. ARGV: token, envelope, pxMs, channel, idjson.
// Writes only while the lease still holds this token: a PUT or DELETE (which
// delete the lease) or an expiry in between refuses the stale set.
const FILL_AND_RELEASE = `${PRELUDE}
if redis.pcall('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local env, v = stamp(ARGV[2], ver(getv(KEYS[1])))
redis.call('SET', KEYS[1], env, 'PX', ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[4], event('fill', ARGV[5], v))
return string.format('%.0f', v)
`;

// KEYS: lease. ARGV: token, channel, message. Compare-and-delete, then wake the waiters.
const RELEASE = `
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
`;

// KEYS: value, lease. ARGV: envelope, pxMs, channel, idjson, kind.
// PUT (kind "put") or DELETE (kind "del", the envelope a tombstone): replaces
// the value with a version above the current one and cancels any lease, so a
// fill already in flight anywhere is refused, then tells the fleet.
const WRITE_AND_CANCEL = `${PRELUDE}
local env, v = stamp(ARGV[1], ver(getv(KEYS[1])))
redis.call('SET', KEYS[1], env, 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[3], event(ARGV[5], ARGV[4], v))
return string.format('%.0f', v)
`;

// KEYS: value. ARGV: expected, envelope, pxMs, channel, idjson.
// A fill without the lease (plain regimes, degraded mode) writes only if the
// key still holds what the flight read: expected "" = absent, "*" = present but
// without a readable version, else that version. Anything written in between
// (a PUT, another fill, a DELETE's tombstone) wins.
const FILL_IF_UNCHANGED = `${PRELUDE}
local cur = getv(KEYS[1])
local mark = ''
if cur then mark = string.match(cur, '^{"v":1,"version":(%d+),') or '*' end
if mark ~= ARGV[1] then return 0 end
local env, v = stamp(ARGV[2], ver(cur))
redis.call('SET', KEYS[1], env, 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[4], event('fill', ARGV[5], v))
return string.format('%.0f', v)
`;

/**
 * What a flight read from L2, for {@link LeaseScripts.fillIfUnchanged}:
 * `""` absent, `"*"` present without a readable version, else the version digits.
 */
export function readMark(text: string | null | undefined): string {
  if (text === null || text === undefined) return '';
  return /^\{"v":1,"version":(\d+),/.exec(text)?.[1] ?? '*';
}

/** The answer of {@link LeaseScripts.readOrLease}. */
export type LeaseAnswer =
  /** A fresh envelope (text). */
  | { kind: 'value'; text: string }
  /** This caller holds the lease and must load; `stale` is the old envelope text, if any. */
  | { kind: 'leased'; token: string; stale: string | undefined }
  /** Another loader holds the lease for `remainingMs` more. */
  | { kind: 'contended'; remainingMs: number; stale: string | undefined };

/** Where a write tells the fleet: the table's channel and the JSON-encoded id. */
export interface EventTarget {
  channel: string;
  idJson: string;
}

type Reply = Promise<unknown>;

interface ScriptCommands {
  eccReadOrLease2(
    value: string,
    lease: string,
    token: string,
    leaseMs: number,
    nowMs: number,
    replaceUpTo: string,
  ): Promise<unknown[]>;
  eccFillAndRelease2(
    value: string,
    lease: string,
    token: string,
    envelope: string,
    pxMs: number,
    channel: string,
    idJson: string,
  ): Reply;
  eccRelease2(lease: string, token: string, channel: string, message: string): Reply;
  eccWriteAndCancel2(
    value: string,
    lease: string,
    envelope: string,
    pxMs: number,
    channel: string,
    idJson: string,
    kind: string,
  ): Reply;
  eccFillIfUnchanged2(
    value: string,
    expected: string,
    envelope: string,
    pxMs: number,
    channel: string,
    idJson: string,
  ): Reply;
}

/** A script's version answer: the version written, or undefined when it refused (0). */
function versionOf(reply: unknown): number | undefined {
  if (reply === 0 || reply === '0' || reply === null) return undefined;
  const n = Number(reply);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/** Typed access to the lease scripts on one ioredis client. */
export class LeaseScripts {
  readonly #client: Redis & ScriptCommands;

  /** Registers the scripts on `client` (idempotent: a client shared by two stores is fine). */
  constructor(client: Redis) {
    const c = client as Redis & Partial<ScriptCommands>;
    if (typeof c.eccReadOrLease2 !== 'function') {
      client.defineCommand('eccReadOrLease2', { numberOfKeys: 2, lua: READ_OR_LEASE });
      client.defineCommand('eccFillAndRelease2', { numberOfKeys: 2, lua: FILL_AND_RELEASE });
      client.defineCommand('eccRelease2', { numberOfKeys: 1, lua: RELEASE });
      client.defineCommand('eccWriteAndCancel2', { numberOfKeys: 2, lua: WRITE_AND_CANCEL });
      client.defineCommand('eccFillIfUnchanged2', { numberOfKeys: 1, lua: FILL_IF_UNCHANGED });
    }
    this.#client = client as Redis & ScriptCommands;
  }

  /**
   * GET the value; on a miss (or a stale or undecodable value) `SET <lease> <random token> NX PX leaseMs`.
   * A fresh value whose version is not above `replaceUpTo` counts as a miss: an
   * early refresh passes the version it means to replace, a caller that could
   * not decode the value passes `Number.MAX_SAFE_INTEGER`.
   *
   * @throws whatever ioredis throws (connection down, `commandTimeout`).
   */
  async readOrLease(
    valueKey: string,
    leaseKey: string,
    leaseMs: number,
    nowMs: number,
    replaceUpTo = 0,
  ): Promise<LeaseAnswer> {
    const token = randomBytes(12).toString('base64url');
    const reply = await this.#client.eccReadOrLease2(
      valueKey,
      leaseKey,
      token,
      leaseMs,
      nowMs,
      String(replaceUpTo),
    );
    const kind = reply[0];
    if (kind === 1) return { kind: 'value', text: String(reply[1]) };
    if (kind === 2) return { kind: 'leased', token, stale: optionalText(reply[1]) };
    return {
      kind: 'contended',
      remainingMs: Math.max(0, Number(reply[1])),
      stale: optionalText(reply[2]),
    };
  }

  /**
   * Writes `envelope` with `PX pxMs` if the lease still holds `token` (its
   * version raised above the current value's), deletes the lease and publishes the fill.
   *
   * @returns the version written, or undefined when the lease was lost (expired,
   *   or cancelled by a PUT or DELETE): nothing was written.
   */
  async fillAndRelease(
    valueKey: string,
    leaseKey: string,
    token: string,
    envelope: string,
    pxMs: number,
    to: EventTarget,
  ): Promise<number | undefined> {
    return versionOf(
      await this.#client.eccFillAndRelease2(
        valueKey,
        leaseKey,
        token,
        envelope,
        pxMs,
        to.channel,
        to.idJson,
      ),
    );
  }

  /**
   * PUT (`kind` "put") or DELETE (`kind` "del", `envelope` a tombstone): writes
   * with a version above the current value's, deletes the lease (so any fill in
   * flight is refused) and publishes the change.
   *
   * @returns the version Valkey ordered the write at.
   */
  async write(
    valueKey: string,
    leaseKey: string,
    envelope: string,
    pxMs: number,
    to: EventTarget,
    kind: 'put' | 'del',
  ): Promise<number> {
    const v = versionOf(
      await this.#client.eccWriteAndCancel2(
        valueKey,
        leaseKey,
        envelope,
        pxMs,
        to.channel,
        to.idJson,
        kind,
      ),
    );
    if (v === undefined) throw new Error('the write script answered no version');
    return v;
  }

  /**
   * A fill without the lease: writes only if the key still holds what the
   * flight read (`expected` from {@link readMark}).
   *
   * @returns the version written, or undefined when something else was written
   *   or deleted meanwhile: nothing was written.
   */
  async fillIfUnchanged(
    valueKey: string,
    expected: string,
    envelope: string,
    pxMs: number,
    to: EventTarget,
  ): Promise<number | undefined> {
    return versionOf(
      await this.#client.eccFillIfUnchanged2(
        valueKey,
        expected,
        envelope,
        pxMs,
        to.channel,
        to.idJson,
      ),
    );
  }

  /** Deletes the lease if it still holds `token` and wakes the waiters; for a failed load. */
  async release(
    leaseKey: string,
    token: string,
    channel: string,
    message: string,
  ): Promise<boolean> {
    return (await this.#client.eccRelease2(leaseKey, token, channel, message)) === 1;
  }
}

function optionalText(x: unknown): string | undefined {
  return x === null || x === undefined || x === false ? undefined : String(x);
}
