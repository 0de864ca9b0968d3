/**
 * The Lua scripts of the L2, each with one name: the same here, in its ioredis
 * command (`ecc` + the name) and in the docs. Plain Lua run with EVALSHA
 * (ioredis `defineCommand`): Redis 7.0 and every Valkey. The value format's
 * own helpers (`LUA_ENVELOPE`) are prepended to the scripts that read or
 * write a value.
 */
import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { LUA_ENVELOPE } from './format.js';

// The coherence message `{ k, id, v }` (id already JSON-encoded), and its PUBLISH:
// always a script's last step, never fatal (an ACL without the channel must not
// turn a write that happened into an error), skipped for channel '' (coherence off).
// Returns the refusal's text, or false.
const LUA_EVENT = `
local function event(kind, idjson, v)
  return '{"k":"' .. kind .. '","id":' .. idjson .. ',"v":' .. string.format('%.0f', v) .. '}'
end
-- A fill's message: the event, and the stored text itself (\`e\`, a JSON string) when it is at most
-- max bytes, so a waiter answers from it (written and published in this one script: exactly what
-- the key holds at version v).
local function fillEvent(idjson, v, env, max)
  local m = '{"k":"fill","id":' .. idjson .. ',"v":' .. string.format('%.0f', v)
  if #env <= tonumber(max) then m = m .. ',"e":' .. cjson.encode(env) end
  return m .. '}'
end
local function notify(channel, message)
  if channel == '' then return false end
  local r = redis.pcall('PUBLISH', channel, message)
  if type(r) == 'table' and r.err then return r.err end
  return false
end
`;

// take(lease, token, ms): false when this caller now holds the lease, else the holder's PTTL.
// A lease without an expiry (or of another type) is broken: it is taken over at once.
const LUA_TAKE = `
local function take(lease, token, ms)
  if redis.call('SET', lease, token, 'NX', 'PX', ms) then return false end
  local ttl = redis.call('PTTL', lease)
  if ttl >= 0 then return ttl end
  redis.call('DEL', lease)
  redis.call('SET', lease, token, 'PX', ms)
  return false
end
`;

// A remembered load failure of the item (KEYS[3] of the reads): its text and what remains of it, ms.
const LUA_FAILURE = `
local function failure(k)
  local e = getv(k)
  if not e then return false, 0 end
  return e, redis.call('PTTL', k)
end
`;

/**
 * readOrLease — KEYS: value, lease, error. ARGV: token, leaseMs, replaceUpTo, fingerprint.
 * Fresh on Valkey's clock (soft expiry after its now, version above
 * replaceUpTo, written by a source of this fingerprint) → `{1, value, now}`.
 * A load of it failed lately (the error key holds what failed) →
 * `{4, failure, pttl, old, now}`: no lease, no load. Anything else (absent,
 * stale, older format, garbage, another type) needs a load: the caller
 * competes for the lease → `{2, old, now}` (leased) or `{3, pttl, old, now}`
 * (contended). Every answer ends with Valkey's clock in µs too (a load's `born`).
 */
const READ_OR_LEASE = `${LUA_ENVELOPE}${LUA_FAILURE}${LUA_TAKE}
local nowms, nowus = clock()
local v = getv(KEYS[1])
local n, soft, hard, fp = header(v)
if n and soft > nowms and n > tonumber(ARGV[3]) and fp == ARGV[4] then return {1, v, nowms, nowus} end
local e, ettl = failure(KEYS[3])
if e then return {4, e, ettl, v, nowms, nowus} end
local ttl = take(KEYS[2], ARGV[1], ARGV[2])
if not ttl then return {2, v, nowms, nowus} end
return {3, ttl, v, nowms, nowus}
`;

/** takeLease — KEYS: lease. ARGV: token, leaseMs. readOrLease's lease step (its one-key path): `{2}` or `{3, pttl}`. */
const TAKE_LEASE = `${LUA_TAKE}
local ttl = take(KEYS[1], ARGV[1], ARGV[2])
if not ttl then return {2} end
return {3, ttl}
`;

/**
 * read — KEYS: value, error. The value (or false), Valkey's now, and a
 * remembered load failure (or false) with what remains of it:
 * `{v, now, failure, pttl}` (cache-aside without the lease). With the value
 * key alone (its one-key path): `{v, now, false, 0}`.
 * Valkey's clock in µs follows, last (a load's `born`): `{…, nowus}`.
 */
const READ = `${LUA_ENVELOPE}${LUA_FAILURE}
local e, ettl = false, 0
if #KEYS > 1 then e, ettl = failure(KEYS[2]) end
local nowms, nowus = clock()
return {getv(KEYS[1]), nowms, e, ettl, nowus}
`;

/** failure — KEYS: error. A remembered load failure (or false) and what remains of it: `{failure, pttl}` (the one-key path's). */
const FAILURE = `${LUA_ENVELOPE}${LUA_FAILURE}
local e, ettl = failure(KEYS[1])
return {e, ettl}
`;

/**
 * renew — KEYS: lease. ARGV: token, leaseMs. While the holder loads, it
 * extends its lease (compare-token `PEXPIRE`); 0 when the lease is gone or
 * another's (the holder is fenced: its fill would be refused).
 */
const RENEW = `
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
`;

// A client's write deadline on Valkey's clock (epoch ms; '0': none). A script run after it
// was given up on by its client (the command timed out, answered 503), so it must not
// write: a later write, acknowledged, may already be there (see L2.#deadline).
const LUA_DEADLINE = `
local function late(deadline)
  local d = tonumber(deadline)
  return d > 0 and (clock()) > d
end
`;

// The written value's ARGV, shared by the write scripts: softIn, hardIn, delta, flags, born,
// fingerprint, tags, json, pxMs. The SET is each write script's first effect: when Valkey refuses
// it (OOM, READONLY) nothing was written. `at`: the version's floor (absent: Valkey's µs clock).
const WRITE_ARGV = `
local function write(key, cur, a, at)
  local nowms, nowus = clock()
  local env, v = stored(cur, nowus, ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4],
    ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], nowms, at)
  redis.call('SET', key, env, 'PX', ARGV[a + 8])
  return v, nowms, nowus, env
end
`;

/**
 * fillAndRelease — KEYS: value, lease. ARGV: token, the written value (8,
 * see WRITE_ARGV), pxMs, channel, idjson, mark, eventMaxBytes, version. Writes only while the
 * lease still holds this token and the value is the one read when the lease was taken
 * (`mark`; or gone, expired): a PUT or DELETE (which delete the lease, after
 * writing on their one-key path) or an expiry in between refuses the stale
 * set (→ 0). With the value key alone (its one-key path, the lease checked
 * and released by separate commands) it is the mark that refuses. It writes at `version`
 * exactly (its holder answered with it before sending the fill: Valkey's clock when the lease
 * was taken, above the version of the value it was taken over), or nothing. Its `fill`
 * event carries the stored text when it is at most eventMaxBytes long.
 */
const FILL_AND_RELEASE = `${LUA_ENVELOPE}${LUA_EVENT}${WRITE_ARGV}
local leased = #KEYS > 1
if leased and redis.pcall('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local cur = getv(KEYS[1])
local n = header(cur)
local at = tonumber(ARGV[15])
if (cur and mark(cur) ~= ARGV[13]) or not at or (n and n >= at) then
  if leased then redis.call('DEL', KEYS[2]) end
  return 0
end
local v, nowms, _, env = write(KEYS[1], n, 2, at)
if leased then redis.call('DEL', KEYS[2]) end
return {string.format('%.0f', v), nowms, notify(ARGV[11], fillEvent(ARGV[12], v, env, ARGV[14]))}
`;

/** release — KEYS: lease. ARGV: token, channel, message. Compare-and-delete, then wake the waiters. */
const RELEASE = `${LUA_EVENT}
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
notify(ARGV[2], ARGV[3])
return 1
`;

/**
 * writeAndCancel — KEYS: value, lease. ARGV: the written value (8, see
 * WRITE_ARGV), pxMs, channel, idjson, kind, deadline (answers Valkey's µs clock too: a PUT's `born`). PUT (kind "put") or DELETE
 * (kind "del", a tombstone): replaces the value with a version above the
 * current one and cancels any lease, so a fill already in flight anywhere is
 * refused, then tells the fleet. Run after its deadline, it writes nothing
 * (→ `'late'`). With the value key alone (its one-key path) it only writes:
 * the caller deletes the lease next.
 */
const WRITE_AND_CANCEL = `${LUA_ENVELOPE}${LUA_EVENT}${WRITE_ARGV}${LUA_DEADLINE}
if late(ARGV[13]) then return 'late' end
local v, nowms, nowus = write(KEYS[1], (header(getv(KEYS[1]))), 1)
if #KEYS > 1 then redis.call('DEL', KEYS[2]) end
return {string.format('%.0f', v), nowms, notify(ARGV[10], event(ARGV[12], ARGV[11], v)),
  string.format('%.0f', nowus)}
`;

/**
 * staleAndCancel — KEYS: value, lease. ARGV: the written value (8, see
 * WRITE_ARGV: a tombstone), pxMs, channel, idjson, deadline, fingerprint. A
 * soft DELETE (a change stream's `stale` mode): a value of this table's source
 * is kept, stale from Valkey's now (its soft expiry brought to now, its hard one
 * kept: served stale while one refresh runs), at a version above its own; any
 * other (absent, another source's, garbage) is replaced by the tombstone as a
 * DELETE does. Either way the lease is cancelled and the fleet told (`del`),
 * so a fill that read the old row is refused. Nothing after its deadline
 * (→ `'late'`); with the value key alone (its one-key path) the caller
 * deletes the lease next.
 */
const STALE_AND_CANCEL = `${LUA_ENVELOPE}${LUA_EVENT}${WRITE_ARGV}${LUA_DEADLINE}
if late(ARGV[12]) then return 'late' end
local cur = getv(KEYS[1])
local n, soft, hard, fp = header(cur)
local v, nowms, nowus
if n and fp == ARGV[13] then
  nowms, nowus = clock()
  v = nowus
  if n >= v then v = n + 1 end
  local _, e = string.find(cur, '^E3|%d+|%d+|')
  local s = soft
  if s > nowms then s = nowms end
  redis.call('SET', KEYS[1], 'E3|' .. string.format('%.0f', v) .. '|' .. string.format('%.0f', s)
    .. '|' .. string.sub(cur, e + 1), 'KEEPTTL')
else
  v, nowms, nowus = write(KEYS[1], n, 1)
end
if #KEYS > 1 then redis.call('DEL', KEYS[2]) end
return {string.format('%.0f', v), nowms, notify(ARGV[10], event('del', ARGV[11], v)),
  string.format('%.0f', nowus)}
`;

/**
 * forget — KEYS: value, lease. ARGV: channel, idjson, deadline. A DELETE
 * without a tombstone (nothing after its deadline: → `'late'`), for when Valkey refuses to store one (OOM): deletes the value and
 * the lease (Valkey accepts DEL under OOM) and tells the fleet, at a version
 * above the deleted value's. With the value key alone (its one-key path) the
 * caller deletes the lease next.
 */
const FORGET = `${LUA_ENVELOPE}${LUA_EVENT}${LUA_DEADLINE}
if late(ARGV[3]) then return 'late' end
local n = header(getv(KEYS[1]))
local nowms, nowus = clock()
local v = nowus
if n and n >= v then v = n + 1 end
redis.call('DEL', unpack(KEYS))
return {string.format('%.0f', v), nowms, notify(ARGV[1], event('del', ARGV[2], v))}
`;

/**
 * fillIfUnchanged — KEYS: value. ARGV: expected, the written value (8, see
 * WRITE_ARGV), pxMs, channel, idjson. A fill without the lease (plain
 * regimes, degraded mode) writes only if the key still holds what the flight
 * read (`expected`, a mark). Anything written in between (a PUT, another
 * fill, a DELETE's tombstone) wins (→ 0).
 */
const FILL_IF_UNCHANGED = `${LUA_ENVELOPE}${LUA_EVENT}${WRITE_ARGV}
local cur = getv(KEYS[1])
if mark(cur) ~= ARGV[1] then return 0 end
local v, nowms = write(KEYS[1], (header(cur)), 2)
return {string.format('%.0f', v), nowms, notify(ARGV[11], event('fill', ARGV[12], v))}
`;

/**
 * purge — KEYS: epochs. ARGV: kind (`H` hard or `S` soft), channel, keepUs,
 * tagsjson, then the tags (none: the whole table). Sets each purged field to
 * the purge's epoch: Valkey's µs clock, raised above what the field held (a
 * clock that stepped back never weakens a purge); drops fields older than
 * keepUs (no row outlives them) and keeps the hash as long; publishes
 * `{"k":"purge","id":"","v":epoch,"soft":…,"tags":…}`.
 */
const PURGE = `${LUA_ENVELOPE}${LUA_EVENT}
local nowms, nowus = clock()
local e = nowus
local fields = {}
if #ARGV == 4 then fields[1] = ARGV[1] else
  for i = 5, #ARGV do fields[#fields + 1] = ARGV[1] .. ARGV[i] end
end
for _, f in ipairs(fields) do
  local cur = tonumber(redis.call('HGET', KEYS[1], f))
  if cur and cur >= e then e = cur + 1 end
end
local es = string.format('%.0f', e)
for _, f in ipairs(fields) do redis.call('HSET', KEYS[1], f, es) end
local keep = tonumber(ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) < nowus - keep then redis.call('HDEL', KEYS[1], all[i]) end
end
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.floor(keep / 1000)))
local soft = ARGV[1] == 'S' and 'true' or 'false'
local message = '{"k":"purge","id":"","v":' .. es .. ',"soft":' .. soft .. ',"tags":' .. ARGV[4] .. '}'
return {es, nowms, notify(ARGV[2], message)}
`;

/**
 * The scripts by name: the ioredis command is `ecc` + the capitalised name.
 * A name ending in `Alone` is the same script on the value key alone: a
 * script's one-key path (see the module's comment).
 */
const SCRIPTS = {
  readOrLease: { keys: 3, lua: READ_OR_LEASE },
  takeLease: { keys: 1, lua: TAKE_LEASE },
  read: { keys: 2, lua: READ },
  readAlone: { keys: 1, lua: READ },
  failure: { keys: 1, lua: FAILURE },
  renew: { keys: 1, lua: RENEW },
  fillAndRelease: { keys: 2, lua: FILL_AND_RELEASE },
  fillAlone: { keys: 1, lua: FILL_AND_RELEASE },
  release: { keys: 1, lua: RELEASE },
  writeAndCancel: { keys: 2, lua: WRITE_AND_CANCEL },
  writeAlone: { keys: 1, lua: WRITE_AND_CANCEL },
  fillIfUnchanged: { keys: 1, lua: FILL_IF_UNCHANGED },
  staleAndCancel: { keys: 2, lua: STALE_AND_CANCEL },
  staleAlone: { keys: 1, lua: STALE_AND_CANCEL },
  forget: { keys: 2, lua: FORGET },
  forgetAlone: { keys: 1, lua: FORGET },
  purge: { keys: 1, lua: PURGE },
} as const;

export type ScriptName = keyof typeof SCRIPTS;
export type ScriptClient = (Redis | Cluster) &
  Record<string, (...args: (string | number)[]) => Promise<unknown>>;

/** The SHA-1 (hex) a script runs under: what `EVALSHA`, `MONITOR` and `SCRIPT EXISTS` name it by. */
export const scriptSha = (name: ScriptName): string =>
  createHash('sha1').update(SCRIPTS[name].lua).digest('hex');

export const commandOf = (name: ScriptName) => `ecc${name[0]?.toUpperCase()}${name.slice(1)}`;

/** Registers the scripts on `client` (idempotent: a client shared by two stores is fine). */
export function defineScripts(client: Redis | Cluster): void {
  for (const [name, { keys, lua }] of Object.entries(SCRIPTS)) {
    const command = commandOf(name as ScriptName);
    if (typeof (client as ScriptClient)[command] !== 'function') {
      client.defineCommand(command, { numberOfKeys: keys, lua });
    }
  }
}
