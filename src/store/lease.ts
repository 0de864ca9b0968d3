/**
 * The fleet lease: Lua scripts that admit one loader per key across every
 * instance (after the leases of memcache, Nishtala et al., "Scaling Memcache
 * at Facebook", NSDI 2013). Value and lease keys share the hash tag `{<id>}`,
 * so each script touches one cluster slot.
 *
 * Plain Lua run with EVALSHA (ioredis `defineCommand`): Redis 7.0 and every
 * Valkey. A cold fill costs two round trips (`readOrLease`, `fillAndRelease`);
 * an L2 hit costs one.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';

// KEYS: value, lease. ARGV: token, leaseMs, nowMs, replaceUpTo: a fresh value
// is returned only if its version is above this (0 normally; a refresh passes
// the version it wants replaced, and a caller that could not decode the value
// passes 2^53 − 1), else the caller competes for the lease.
// A value is fresh when its envelope header says softExpiresAt > now (the
// encoder writes `{"v":1,"version":N,"softExpiresAt":N,` first). Anything else
// (absent, stale, foreign or garbage) needs a load, so the caller competes for the lease.
const READ_OR_LEASE = `
local v = redis.call('GET', KEYS[1])
if v then
  local ver, soft = string.match(v, '^{"v":1,"version":(%d+),"softExpiresAt":(%d+),')
  if soft and tonumber(soft) > tonumber(ARGV[3]) and tonumber(ver) > tonumber(ARGV[4]) then
    return {1, v}
  end
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2, v or false} end
return {3, redis.call('PTTL', KEYS[2]), v or false}
`;

// KEYS: value, lease. ARGV: token, envelope, pxMs, channel, message.
// Writes only while the lease still holds this token: a DELETE (which deletes
// the lease) or an expiry in between refuses the stale set.
const FILL_AND_RELEASE = `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
`;

// KEYS: lease. ARGV: token, channel, message. Compare-and-delete, then wake the waiters.
const RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
`;

// KEYS: value, lease. ARGV: envelope, pxMs, channel, message.
// A write (PUT) replaces the value and cancels any lease, so a fill already in
// flight anywhere in the fleet is refused instead of overwriting the write.
const WRITE_AND_CANCEL = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`;

// KEYS: value, lease. ARGV: channel, message. DELETE: both keys, then tell the fleet.
const INVALIDATE = `
local n = redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return n
`;

// KEYS: value. ARGV: expected, envelope, pxMs.
// A fill without the lease (plain regimes, degraded mode) writes only if the
// key still holds what the flight read: expected "" = absent, "*" = present but
// without a readable version, else that version. Anything written in between
// (a PUT, another fill, a DELETE) wins.
const FILL_IF_UNCHANGED = `
local v = redis.call('GET', KEYS[1])
local now
if v then
  now = string.match(v, '^{"v":1,"version":(%d+),') or '*'
else
  now = ''
end
if now ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
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

interface ScriptCommands {
  eccReadOrLease(
    value: string,
    lease: string,
    token: string,
    leaseMs: number,
    nowMs: number,
    replaceUpTo: string,
  ): Promise<unknown[]>;
  eccWriteAndCancel(
    value: string,
    lease: string,
    envelope: string,
    pxMs: number,
    channel: string,
    message: string,
  ): Promise<number>;
  eccInvalidate(value: string, lease: string, channel: string, message: string): Promise<number>;
  eccFillIfUnchanged(
    value: string,
    expected: string,
    envelope: string,
    pxMs: number,
  ): Promise<number>;
  eccFillAndRelease(
    value: string,
    lease: string,
    token: string,
    envelope: string,
    pxMs: number,
    channel: string,
    message: string,
  ): Promise<number>;
  eccRelease(lease: string, token: string, channel: string, message: string): Promise<number>;
}

/** Typed access to the lease scripts on one ioredis client. */
export class LeaseScripts {
  readonly #client: Redis & ScriptCommands;

  /** Registers the scripts on `client` (idempotent: a client shared by two stores is fine). */
  constructor(client: Redis) {
    const c = client as Redis & Partial<ScriptCommands>;
    if (typeof c.eccReadOrLease !== 'function') {
      client.defineCommand('eccReadOrLease', { numberOfKeys: 2, lua: READ_OR_LEASE });
      client.defineCommand('eccFillAndRelease', { numberOfKeys: 2, lua: FILL_AND_RELEASE });
      client.defineCommand('eccRelease', { numberOfKeys: 1, lua: RELEASE });
      client.defineCommand('eccWriteAndCancel', { numberOfKeys: 2, lua: WRITE_AND_CANCEL });
      client.defineCommand('eccInvalidate', { numberOfKeys: 2, lua: INVALIDATE });
      client.defineCommand('eccFillIfUnchanged', { numberOfKeys: 1, lua: FILL_IF_UNCHANGED });
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
    const reply = await this.#client.eccReadOrLease(
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
   * Writes `envelope` with `PX pxMs` if the lease still holds `token`, deletes
   * the lease and publishes `message` on `channel`.
   *
   * @returns false when the lease was lost (expired or invalidated): nothing was written.
   */
  async fillAndRelease(
    valueKey: string,
    leaseKey: string,
    token: string,
    envelope: string,
    pxMs: number,
    channel: string,
    message: string,
  ): Promise<boolean> {
    return (
      (await this.#client.eccFillAndRelease(
        valueKey,
        leaseKey,
        token,
        envelope,
        pxMs,
        channel,
        message,
      )) === 1
    );
  }

  /** PUT: `SET value … PX pxMs`, `DEL lease` (so any fill in flight is refused), `PUBLISH message`. */
  async writeAndCancel(
    valueKey: string,
    leaseKey: string,
    envelope: string,
    pxMs: number,
    channel: string,
    message: string,
  ): Promise<void> {
    await this.#client.eccWriteAndCancel(valueKey, leaseKey, envelope, pxMs, channel, message);
  }

  /** DELETE: removes the value and the lease (refusing any fill in flight), then `PUBLISH message`. */
  async invalidate(
    valueKey: string,
    leaseKey: string,
    channel: string,
    message: string,
  ): Promise<void> {
    await this.#client.eccInvalidate(valueKey, leaseKey, channel, message);
  }

  /**
   * A fill without the lease: writes only if the key still holds what the
   * flight read (`expected` from {@link readMark}).
   *
   * @returns false when something else was written or deleted meanwhile: nothing was written.
   */
  async fillIfUnchanged(
    valueKey: string,
    expected: string,
    envelope: string,
    pxMs: number,
  ): Promise<boolean> {
    return (await this.#client.eccFillIfUnchanged(valueKey, expected, envelope, pxMs)) === 1;
  }

  /** Deletes the lease if it still holds `token` and wakes the waiters; for a failed load. */
  async release(
    leaseKey: string,
    token: string,
    channel: string,
    message: string,
  ): Promise<boolean> {
    return (await this.#client.eccRelease(leaseKey, token, channel, message)) === 1;
  }
}

function optionalText(x: unknown): string | undefined {
  return x === null || x === undefined || x === false ? undefined : String(x);
}
