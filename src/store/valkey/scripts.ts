/**
 * The Valkey side of a table: its key layout and the Lua scripts that admit
 * one loader per key across every instance (the leases of memcache: Nishtala
 * et al., "Scaling Memcache at Facebook", NSDI 2013) and let Valkey, not the
 * instances' clocks, order every write of a key.
 *
 * Plain Lua run with EVALSHA (ioredis `defineCommand`): Redis 7.0 and every
 * Valkey. A cold fill costs two round trips (`readOrLease`, `fillAndRelease`);
 * an L2 hit costs one. Each script touches one cluster slot: an item's value
 * and lease keys share the hash tag `{<id>}`. Each script has one name, the
 * same here, in its ioredis command (`ecc` + the name) and in the docs.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { type Envelope, encodeEnvelope, LUA_ENVELOPE } from '../envelope.js';
import type { Breaker } from './breaker.js';

/**
 * The Valkey key of an item's envelope: `ecc:<table>:{<id>}`.
 *
 * The mapping is injective: table names cannot contain `:`, and the value key
 * ends in `}` while a lease key ends in `:lease`, so no id can address another
 * table's key or a lease key.
 */
export function valueKey(table: string, id: string): string {
  return `ecc:${table}:{${id}}`;
}

/** The Valkey key of an item's lease: `ecc:<table>:{<id>}:lease`. */
export function leaseKey(table: string, id: string): string {
  return `ecc:${table}:{${id}}:lease`;
}

/** The pub/sub channel of a table's fills and invalidations: `ecc:events:<table>`. */
export function eventsChannel(table: string): string {
  return `ecc:events:${table}`;
}

// The coherence message `{ k, id, v }` (id already JSON-encoded).
const LUA_EVENT = `
local function event(kind, idjson, v)
  return '{"k":"' .. kind .. '","id":' .. idjson .. ',"v":' .. string.format('%.0f', v) .. '}'
end
`;

/**
 * readOrLease — KEYS: value, lease. ARGV: token, leaseMs, nowMs, replaceUpTo.
 * Fresh (soft expiry after now, version above replaceUpTo) → `{1, value}`.
 * Anything else (absent, stale, older format, garbage, another type) needs a
 * load: the caller competes for the lease → `{2, old}` (leased) or
 * `{3, pttl, old}` (contended). A lease without an expiry (or of another type)
 * is broken: it is taken over at once.
 */
const READ_OR_LEASE = `${LUA_ENVELOPE}
local v = getv(KEYS[1])
local n, soft = header(v)
if n and soft > tonumber(ARGV[3]) and n > tonumber(ARGV[4]) then return {1, v} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2, v} end
local ttl = redis.call('PTTL', KEYS[2])
if ttl < 0 then
  redis.call('DEL', KEYS[2])
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  return {2, v}
end
return {3, ttl, v}
`;

/**
 * fillAndRelease — KEYS: value, lease. ARGV: token, envelope, pxMs, channel, idjson.
 * Writes only while the lease still holds this token: a PUT or DELETE (which
 * delete the lease) or an expiry in between refuses the stale set (→ 0).
 */
const FILL_AND_RELEASE = `${LUA_ENVELOPE}${LUA_EVENT}
if redis.pcall('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local env, v = stamp(ARGV[2], header(getv(KEYS[1])))
redis.call('SET', KEYS[1], env, 'PX', ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[4], event('fill', ARGV[5], v))
return string.format('%.0f', v)
`;

/** release — KEYS: lease. ARGV: token, channel, message. Compare-and-delete, then wake the waiters. */
const RELEASE = `
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
`;

/**
 * writeAndCancel — KEYS: value, lease. ARGV: envelope, pxMs, channel, idjson, kind.
 * PUT (kind "put") or DELETE (kind "del", the envelope a tombstone): replaces
 * the value with a version above the current one and cancels any lease, so a
 * fill already in flight anywhere is refused, then tells the fleet.
 */
const WRITE_AND_CANCEL = `${LUA_ENVELOPE}${LUA_EVENT}
local env, v = stamp(ARGV[1], header(getv(KEYS[1])))
redis.call('SET', KEYS[1], env, 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[3], event(ARGV[5], ARGV[4], v))
return string.format('%.0f', v)
`;

/**
 * fillIfUnchanged — KEYS: value. ARGV: expected, envelope, pxMs, channel, idjson.
 * A fill without the lease (plain regimes, degraded mode) writes only if the
 * key still holds what the flight read (`expected`, a mark). Anything written
 * in between (a PUT, another fill, a DELETE's tombstone) wins (→ 0).
 */
const FILL_IF_UNCHANGED = `${LUA_ENVELOPE}${LUA_EVENT}
local cur = getv(KEYS[1])
if mark(cur) ~= ARGV[1] then return 0 end
local env, v = stamp(ARGV[2], header(cur))
redis.call('SET', KEYS[1], env, 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[4], event('fill', ARGV[5], v))
return string.format('%.0f', v)
`;

/** The scripts by name: the ioredis command is `ecc` + the capitalised name. */
const SCRIPTS = {
  readOrLease: { keys: 2, lua: READ_OR_LEASE },
  fillAndRelease: { keys: 2, lua: FILL_AND_RELEASE },
  release: { keys: 1, lua: RELEASE },
  writeAndCancel: { keys: 2, lua: WRITE_AND_CANCEL },
  fillIfUnchanged: { keys: 1, lua: FILL_IF_UNCHANGED },
} as const;

type ScriptName = keyof typeof SCRIPTS;
type ScriptClient = Redis & Record<string, (...args: (string | number)[]) => Promise<unknown>>;

const commandOf = (name: ScriptName) => `ecc${name[0]?.toUpperCase()}${name.slice(1)}`;

/** Registers the scripts on `client` (idempotent: a client shared by two stores is fine). */
export function defineScripts(client: Redis): void {
  for (const [name, { keys, lua }] of Object.entries(SCRIPTS)) {
    const command = commandOf(name as ScriptName);
    if (typeof (client as ScriptClient)[command] !== 'function') {
      client.defineCommand(command, { numberOfKeys: keys, lua });
    }
  }
}

/** The answer of {@link L2.readOrLease}. */
export type LeaseAnswer =
  /** A fresh envelope (text). */
  | { kind: 'value'; text: string }
  /** This caller holds the lease and must load; `stale` is the old envelope text, if any. */
  | { kind: 'leased'; token: string; stale: string | undefined }
  /** Another loader holds the lease for `remainingMs` more. */
  | { kind: 'contended'; remainingMs: number; stale: string | undefined };

/** The kinds of coherence message a write publishes. */
export type WriteKind = 'put' | 'del';

/**
 * One table's view of Valkey: every command goes through the breaker
 * (`breaker.run`), so a dead or sick server is noticed in one place.
 * All methods throw what {@link Breaker.run} throws (`CircuitOpenError` when
 * nothing was sent; a timeout or reply error otherwise).
 */
export class L2 {
  readonly #client: ScriptClient;
  readonly #breaker: Breaker;
  readonly #table: string;
  readonly #channel: string;

  constructor(client: Redis, breaker: Breaker, table: string) {
    defineScripts(client);
    this.#client = client as ScriptClient;
    this.#breaker = breaker;
    this.#table = table;
    this.#channel = eventsChannel(table);
  }

  #call(name: ScriptName, ...args: (string | number)[]): Promise<unknown> {
    const command = commandOf(name);
    return this.#breaker.run(() => this.#client[command]?.(...args) as Promise<unknown>);
  }

  /** Plain `GET` of the value key (cache-aside without the lease). */
  get(id: string): Promise<string | null> {
    return this.#breaker.run(() => this.#client.get(valueKey(this.#table, id)));
  }

  /**
   * `readOrLease`: the value if fresh at `nowMs` and newer than `replaceUpTo`;
   * else `SET <lease> <random token> NX PX leaseMs`. An early refresh passes the
   * version it means to replace; a caller that could not decode the value
   * passes `Number.MAX_SAFE_INTEGER`.
   */
  async readOrLease(
    id: string,
    leaseMs: number,
    nowMs: number,
    replaceUpTo: number,
  ): Promise<LeaseAnswer> {
    const token = randomBytes(12).toString('base64url');
    const reply = (await this.#call(
      'readOrLease',
      valueKey(this.#table, id),
      leaseKey(this.#table, id),
      token,
      leaseMs,
      nowMs,
      String(replaceUpTo),
    )) as unknown[];
    if (reply[0] === 1) return { kind: 'value', text: String(reply[1]) };
    if (reply[0] === 2) return { kind: 'leased', token, stale: optionalText(reply[1]) };
    return {
      kind: 'contended',
      remainingMs: Math.max(0, Number(reply[1])),
      stale: optionalText(reply[2]),
    };
  }

  /**
   * `fillAndRelease`: writes `envelope` (hard TTL `pxMs`) if the lease still
   * holds `token`, deletes the lease and publishes the fill.
   *
   * @returns the version Valkey wrote it at (raised above the key's), or
   *   undefined when the lease was lost (expired, or cancelled by a PUT or
   *   DELETE): nothing was written.
   */
  async fillAndRelease(
    id: string,
    token: string,
    envelope: Envelope,
    pxMs: number,
  ): Promise<number | undefined> {
    return versionOf(
      await this.#call(
        'fillAndRelease',
        valueKey(this.#table, id),
        leaseKey(this.#table, id),
        token,
        encodeEnvelope(envelope),
        pxMs,
        this.#channel,
        JSON.stringify(id),
      ),
    );
  }

  /**
   * `fillIfUnchanged`: a fill without the lease; writes only if the key still
   * holds what the flight read (`expected`, from `readMark`).
   *
   * @returns the version written, or undefined when something else was written
   *   or deleted meanwhile: nothing was written.
   */
  async fillIfUnchanged(
    id: string,
    expected: string,
    envelope: Envelope,
    pxMs: number,
  ): Promise<number | undefined> {
    return versionOf(
      await this.#call(
        'fillIfUnchanged',
        valueKey(this.#table, id),
        expected,
        encodeEnvelope(envelope),
        pxMs,
        this.#channel,
        JSON.stringify(id),
      ),
    );
  }

  /**
   * `writeAndCancel`: PUT (`kind` "put") or DELETE (`kind` "del", `envelope` a
   * tombstone): writes with a version above the key's, deletes the lease (so
   * any fill in flight is refused) and publishes the change.
   *
   * @returns the version Valkey ordered the write at.
   */
  async write(id: string, envelope: Envelope, pxMs: number, kind: WriteKind): Promise<number> {
    const v = versionOf(
      await this.#call(
        'writeAndCancel',
        valueKey(this.#table, id),
        leaseKey(this.#table, id),
        encodeEnvelope(envelope),
        pxMs,
        this.#channel,
        JSON.stringify(id),
        kind,
      ),
    );
    if (v === undefined) throw new Error('the write script answered no version');
    return v;
  }

  /** `release`: deletes the lease if it still holds `token` and wakes the waiters (a failed load). */
  async release(id: string, token: string): Promise<boolean> {
    const message = JSON.stringify({ k: 'release', id });
    return (
      (await this.#call('release', leaseKey(this.#table, id), token, this.#channel, message)) === 1
    );
  }
}

/** A script's version answer: the version written, or undefined when it refused (0). */
function versionOf(reply: unknown): number | undefined {
  if (reply === 0 || reply === '0' || reply === null) return undefined;
  const n = Number(reply);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

function optionalText(x: unknown): string | undefined {
  return x === null || x === undefined || x === false ? undefined : String(x);
}
