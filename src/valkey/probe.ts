/**
 * What the store checks about its server beyond "does it answer":
 *
 * - **access** (start-up): may this user run the scripts, write the tables'
 *   keys, and publish and subscribe on their channels? A Redis 7 ACL user
 *   gets no channel at all by default (`resetchannels`); without this check
 *   such a user starts fine and fails on the first write. A missing right
 *   refuses the start, naming the right.
 * - **health** (the breaker's own probe): a write and a publish, so it fails
 *   while the server is out of memory, read-only or refusing permissions,
 *   where a PING would pass.
 * - **eviction**: `maxmemory-policy`, read at start-up and on each reconnect;
 *   a policy that may evict leases and tombstones before cold values is warned
 *   about.
 */
import type { Cluster, Redis } from 'ioredis';
import { eventsChannel, keyPrefix } from '../l2/keys.js';
import { SCRIPT_ACL_REFUSAL } from './breaker.js';
import { isCluster, keySlot } from './slots.js';

/**
 * probe — KEYS: a probe key of the table. ARGV: channel ('' with coherence
 * off), mode. Runs every command the scripts use (the hash ones of a purge's
 * epochs on the same key, once it is deleted). Mode `report`: each under
 * `pcall`, returning `{command, error, …}` for those refused. Mode `raise`:
 * the first refusal is the script's error, as the server words it (so the
 * client sees `READONLY …` and reconnects). The key is written with a 1 s
 * expiry and deleted; the message is empty (subscribers ignore it).
 */
const PROBE = `
local refused = {}
local function try(...)
  if ARGV[2] == 'raise' then
    redis.call(...)
    return
  end
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    refused[#refused + 1] = (...)
    refused[#refused + 1] = r.err
  end
end
try('TIME')
try('GET', KEYS[1])
try('SET', KEYS[1], '1', 'PX', 1000)
try('PTTL', KEYS[1])
try('PEXPIRE', KEYS[1], 1000)
try('DEL', KEYS[1])
try('HSET', KEYS[1], 'H', '1')
try('HGET', KEYS[1], 'H')
try('HGETALL', KEYS[1])
try('HDEL', KEYS[1], 'H')
redis.pcall('DEL', KEYS[1])
if ARGV[1] ~= '' then try('PUBLISH', ARGV[1], '') end
return refused
`;

type ProbeClient = Redis & {
  eccProbe(key: string, channel: string, mode: 'report' | 'raise'): Promise<string[]>;
};

const defineProbe = (c: ProbeClient) => {
  if (typeof c.eccProbe !== 'function')
    c.defineCommand('eccProbe', { numberOfKeys: 1, lua: PROBE });
};

/**
 * The probe key of `table`: `ecc:[<namespace>:]<table>:probe`. It can be neither a value
 * key (`…:{…}`) nor a lease key, and any ACL key pattern that
 * covers the table's keys (`~ecc:*`, `~ecc:<table>:*`) covers it.
 */
export function probeKey(table: string, namespace = ''): string {
  return `${keyPrefix(table, namespace)}:probe`;
}

/** One refused command of the probe: its name and the server's words. */
export interface Refusal {
  command: string;
  error: string;
}

/**
 * Runs the probe once (`EVALSHA`, so it needs the scripting right too).
 *
 * @param channel the table's channel, or '' when coherence is off.
 * @param key the probe key (default {@link probeKey}; on one cluster node, a key of its slots).
 * @returns the commands the server refused (none when healthy).
 * @throws whatever the command throws (a timeout; `NOPERM` when the user may
 *   not run scripts or touch the key).
 */
export async function runProbe(
  client: Redis | Cluster,
  table: string,
  channel: string,
  key = probeKey(table),
): Promise<Refusal[]> {
  const c = client as ProbeClient;
  defineProbe(c);
  const flat = await c.eccProbe(key, channel, 'report');
  const refused: Refusal[] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) {
    refused.push({ command: String(flat[i]), error: String(flat[i + 1]) });
  }
  return refused;
}

/**
 * The breaker's health probe: the probe on `table`, failing with the first
 * refusal as the server words it (the breaker reads its reason, e.g. `OOM`;
 * a `READONLY` makes the client reconnect, following a failover). It fails
 * after `timeoutMs` whatever the client's own timeout (a caller's client may
 * have none), so the probe is never held for good.
 */
export function healthProbe(
  client: Redis | Cluster,
  table: string,
  channel: string,
  timeoutMs = 2_000,
  namespace = '',
): () => Promise<void> {
  return async () => {
    const c = client as ProbeClient;
    defineProbe(c);
    const answered = await within(
      c.eccProbe(probeKey(table, namespace), channel, 'raise').then(() => true),
      timeoutMs,
    );
    if (answered === undefined)
      throw new Error(`the health probe got no answer in ${timeoutMs} ms`);
  };
}

/** Refusals that are about rights (ACL), not about the server's state. */
function isAccessRefusal(text: string): boolean {
  return text.startsWith('NOPERM') || text.includes(SCRIPT_ACL_REFUSAL);
}

/**
 * The rights a user lacks, as sentences naming the ACL rule to grant, from
 * the probe's refusals (or its own `NOPERM`) and the subscriptions' outcome.
 * A refusal about the server's state (OOM, READONLY) is not a missing right.
 */
export function missingRights(
  table: string,
  outcome: Refusal[] | Error,
  subscribed: boolean | undefined,
  namespace = '',
): string[] {
  const channel = `the channel ${eventsChannel(table, namespace)}`;
  const missing: string[] = [];
  if (outcome instanceof Error) {
    const text = outcome.message;
    if (/'eval(sha)?' command/.test(text))
      missing.push('run Lua scripts (EVALSHA, EVAL): grant +@scripting');
    else if (text.includes('keys')) missing.push(`write the keys ecc:${table}:*: grant ~ecc:*`);
    else if (isAccessRefusal(text)) missing.push(`${text}`);
  } else {
    for (const { command, error } of outcome) {
      if (!isAccessRefusal(error)) continue;
      if (error.includes('channel'))
        missing.push(
          `publish on ${channel}: grant &ecc:events:* (or &*), or set valkey.coherence: false`,
        );
      else if (error.includes('keys')) missing.push(`${command} ecc:${table}:*: grant ~ecc:*`);
      else
        missing.push(`run ${command}: grant +${command.toLowerCase()} (${commandGroup(command)})`);
    }
  }
  if (subscribed === false && missing.length === 0) {
    missing.push(
      `subscribe to ${channel}: grant +@pubsub and &ecc:events:* (or set valkey.coherence: false)`,
    );
  }
  return missing;
}

function commandGroup(command: string): string {
  if (command === 'PUBLISH') return 'or +@pubsub';
  if (command === 'GET' || command === 'PTTL' || command === 'HGET' || command === 'HGETALL')
    return 'or +@read';
  return 'or +@write';
}

/** The server's eviction policy and, when it may evict leases or tombstones first, the risk in words. */
export interface EvictionPolicy {
  /** `maxmemory-policy`; undefined when this user may read neither `CONFIG GET` nor `INFO`. */
  policy: string | undefined;
  /** Why this policy is risky for EchoStore's keys; undefined when it is not (or is unknown). */
  risk: string | undefined;
}

/**
 * What each risky policy may do to EchoStore's keys. Every EchoStore key has
 * an expiry, leases (`leaseMs`) and DELETE tombstones (`leaseMs` + 60 s) the
 * shortest; a lost lease lets a second instance load the same key, a lost
 * tombstone lets a lease-less fill bring a deleted row back. `allkeys-lru` and
 * `allkeys-lfu` evict cold values first (a lease or a tombstone was just
 * written), and `noeviction` refuses writes instead (the store degrades and a
 * DELETE falls back to plain deletion).
 */
const EVICTION_RISKS: Readonly<Record<string, string>> = {
  'volatile-ttl':
    'evicts the keys nearest to their expiry first: leases and DELETE tombstones go before any cached value',
  'volatile-lru':
    'evicts only keys with an expiry, which every EchoStore key has (leases and tombstones too): they bear all the eviction while keys of other applications without one are kept',
  'volatile-lfu':
    'evicts only keys with an expiry, which every EchoStore key has (leases and tombstones too): they bear all the eviction while keys of other applications without one are kept',
  'volatile-random':
    'evicts keys with an expiry at random: a lease or a DELETE tombstone as readily as a cold value',
  'allkeys-random':
    'evicts keys at random: a lease or a DELETE tombstone as readily as a cold value',
};

/**
 * Reads `maxmemory-policy` (`CONFIG GET`, else `INFO memory` for a user
 * without `+config`), and judges it for EchoStore's keys. Never throws.
 */
export async function readEvictionPolicy(client: Redis | Cluster): Promise<EvictionPolicy> {
  let policy: string | undefined;
  try {
    const reply = (await client.config('GET', 'maxmemory-policy')) as string[];
    policy = reply[1];
  } catch {
    try {
      policy = /^maxmemory_policy:(\S+)/m.exec(await client.info('memory'))?.[1];
    } catch {
      policy = undefined;
    }
  }
  return { policy, risk: policy === undefined ? undefined : EVICTION_RISKS[policy] };
}

/**
 * The start-up access check: the probe on every table (its channel too with
 * coherence on), and the outcome of every table's subscription, each bounded
 * by `timeoutMs`. On a cluster the probe runs on every node, primaries and
 * replicas (ACL users are per node, and a replica is a primary after a
 * failover): on each through its own connection, with a probe key of a slot
 * that node serves; a replica's refusal of a write for being a replica
 * (`READONLY`) is not a missing right, but its ACL's `NOPERM` is.
 *
 * @param subscribed per table, its subscription (resolves false when refused); empty with coherence off.
 * @returns the missing rights, as sentences naming the ACL rule to grant and, on a cluster,
 *   the nodes (`host:port`) that lack it (none: all is well).
 */
export async function checkAccess(
  client: Redis | Cluster,
  tables: string[],
  subscribed: ReadonlyMap<string, Promise<boolean>>,
  coherence: boolean,
  timeoutMs: number,
  namespace = '',
): Promise<string[]> {
  const targets = isCluster(client) ? clusterTargets(client) : [{ node: '', client }];
  const perTable = await Promise.all(
    tables.map(async (table) => {
      const channel = coherence ? eventsChannel(table, namespace) : '';
      const sub = subscribed.get(table);
      const ok = sub === undefined ? undefined : await within(sub, timeoutMs);
      const perNode = await Promise.all(
        targets.map(async (t) => {
          const key =
            t.slot === undefined
              ? probeKey(table, namespace)
              : slotProbeKey(table, t.slot, namespace);
          const outcome = await within(
            runProbe(t.client, table, channel, key).catch((err: unknown) => err as Error),
            timeoutMs,
          );
          return {
            node: t.node,
            rights: outcome === undefined ? [] : missingRights(table, outcome, ok, namespace),
          };
        }),
      );
      return onNodes(perNode);
    }),
  );
  return [...new Set(perTable.flat())];
}

/** One connection the access check probes: a cluster node (`host:port`, a slot it serves) or the client. */
interface ProbeTarget {
  node: string;
  client: Redis | Cluster;
  slot?: number;
}

/** Every node of `cluster`'s slot map, each with the first slot it serves (as primary or replica). */
function clusterTargets(cluster: Cluster): ProbeTarget[] {
  const slotOf = new Map<string, number>();
  cluster.slots.forEach((nodes, slot) => {
    for (const node of nodes ?? []) if (!slotOf.has(node)) slotOf.set(node, slot);
  });
  return cluster.nodes('all').flatMap((redis) => {
    const node = `${redis.options.host}:${redis.options.port}`;
    const slot = slotOf.get(node);
    return slot === undefined ? [] : [{ node, client: redis, slot }];
  });
}

/**
 * A probe key of `table` in hash slot `slot`: `ecc:<table>:probe:{<n>}` for
 * the first n that hashes there (covered by the same ACL patterns as
 * {@link probeKey}; at most a few tens of thousands of tries, once per node at start-up).
 */
export function slotProbeKey(table: string, slot: number, namespace = ''): string {
  for (let n = 0; ; n++) {
    if (keySlot(`{${n}}`) === slot) return `${keyPrefix(table, namespace)}:probe:{${n}}`;
  }
}

/** The nodes' missing rights as one list: each right once, naming the nodes that lack it. */
function onNodes(perNode: { node: string; rights: string[] }[]): string[] {
  const nodesOf = new Map<string, string[]>();
  for (const { node, rights } of perNode) {
    for (const right of rights) nodesOf.set(right, [...(nodesOf.get(right) ?? []), node]);
  }
  return [...nodesOf].map(([right, nodes]) =>
    nodes[0] === '' ? right : `${right} (on ${nodes.join(', ')})`,
  );
}

/** What `promise` resolves with, or undefined after `ms` (its rejection, if it rejects first). */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
