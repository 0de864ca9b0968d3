/**
 * The fault drill's phases 4 to 8 (drills/README.md#faults), where Valkey *answers* with an
 * error or a subscriber stops delivering: each provokes its fault on real processes and returns
 * its check.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { Origin } from '../../harness/origin.js';
import { type Service, spawnService, startService } from '../../harness/service.js';
import type { TcpProxy } from '../../harness/tcp-proxy.js';
import { spawnValkey, type ValkeyServer } from '../../harness/valkey-server.js';
import { FAULT_VALKEY, REQUEST_TIMEOUT_MS, until } from './fault-policy.js';
import { itemUrl, ready, readyWhen, readyz, timed } from './http.js';
import { bump, type Check, check, listCounts } from './report.js';

/** What every refusal phase works with. */
export interface RefusalDrill {
  /** Instances A and B, both reaching Valkey through `proxy`. */
  services: Service[];
  valkey: ValkeyServer;
  /** A connection straight to `valkey`, for the operator's commands. */
  admin: Redis;
  proxy: TcpProxy;
  origin: Origin;
  table: string;
  /** The config file A and B run on. */
  config: object;
  /** A unique suffix for this run's ids. */
  run: string;
}

/** How long the store may take to leave degraded mode after Valkey recovers from a refusal. */
const RECOVER_WITHIN_MS = 2_000;
/** How long a frozen subscriber may go unnoticed (and L1 unflushed). */
const SUBSCRIBER_WITHIN_MS = 5_000;

/** The instances' base URLs (`readyWhen` polls them all at once). */
const urls = (d: RefusalDrill) => d.services.map((s) => s.url);
const ms = (x: number | undefined) => (x === undefined ? 'never' : `${x} ms`);
/** Recovered in time: within {@link RECOVER_WITHIN_MS}. */
const inTime = (x: number | undefined) => x !== undefined && x <= RECOVER_WITHIN_MS;

/** A request on `service`, tallied as `PUT 200`, `DELETE 503 ECC_VALKEY_UNAVAILABLE`, …; its status and body. */
async function send(
  d: RefusalDrill,
  service: Service,
  id: string,
  tally: Record<string, number> = {},
  method: 'GET' | 'PUT' | 'DELETE' = 'GET',
  json: unknown = method === 'PUT' ? { id } : undefined,
) {
  const r = await timed(itemUrl(service.url, d.table, id), REQUEST_TIMEOUT_MS, method, json);
  bump(tally, `${method} ${r.status === 0 ? 'no answer' : r.status}${r.code ? ` ${r.code}` : ''}`);
  return { status: r.status, body: r.status === 200 ? r.body : '' };
}

async function fillUp(admin: Redis): Promise<void> {
  await admin.config('SET', 'maxmemory-policy', 'noeviction');
  await admin.config('SET', 'maxmemory', '1');
}

/** Phase 4: the circuit opens while Valkey is paused, and its half-open probe meets OOM. */
async function oomWithProbeInFlight(d: RefusalDrill): Promise<Check> {
  d.valkey.pause();
  const opened = await readyWhen(urls(d), (r) => r.status === 'degraded');
  // Sent while paused: run when it resumes, before any probe.
  const filled = fillUp(d.admin);
  d.valkey.resume();
  await filled;
  const oom = await readyWhen(urls(d), (r) => r.reason === 'oom', 8_000);
  const tally: Record<string, number> = {};
  await send(d, d.services[0] as Service, `oom-put-${d.run}`, tally, 'PUT');
  // The probe keeps meeting OOM, and keeps being given back.
  await sleep(1_500);
  const stillOom = (await readyWhen(urls(d), (r) => r.reason === 'oom', 1)) !== undefined;
  await d.admin.config('SET', 'maxmemory', '0');
  const recovered = await readyWhen(urls(d), ready);
  return check(
    `OOM with a probe in flight: /readyz says oom, then ready within ${RECOVER_WITHIN_MS} ms of maxmemory being raised`,
    oom !== undefined && stillOom && inTime(recovered),
    `degraded ${ms(opened)} after SIGSTOP, oom on both ${ms(oom)} after SIGCONT, still 1.5 s later: ${stillOom}; ${listCounts(tally)}; recovered in ${ms(recovered)}`,
  );
}

/** Phase 5: at maxmemory a DELETE cannot write its tombstone, so it falls back to deleting. */
async function oomDelete(d: RefusalDrill): Promise<Check> {
  const [a, b] = d.services as [Service, Service];
  const id = `oom-del-${d.run}`;
  const bodies = async () => [(await send(d, a, id)).body, (await send(d, b, id)).body];
  const [old, oldOnB] = await bodies();
  await fillUp(d.admin);
  const tally: Record<string, number> = {};
  await send(d, a, id, tally, 'PUT');
  const deleted = (await send(d, a, id, tally, 'DELETE')).status;
  const isNew = (f: string) => f !== '' && f !== old;
  const goneMs = await until(2_000, async () => (await bodies()).every(isNew));
  await d.admin.config('SET', 'maxmemory', '0');
  const recovered = await readyWhen(urls(d), ready);
  const reads = d.origin.readsOf(id);
  return check(
    `OOM delete: DELETE answers 204, no instance serves the old row, ready within ${RECOVER_WITHIN_MS} ms of maxmemory being raised`,
    old !== '' && old === oldOnB && deleted === 204 && goneMs !== undefined && inTime(recovered),
    `${listCounts(tally)}; old row gone from A and B ${goneMs === undefined ? 'NOT' : `within ${goneMs} ms`}; origin reads ${reads} (first read, then A and B each read it again); recovered in ${ms(recovered)}`,
  );
}

/** Phase 6: the server is demoted to a read-only replica, as a failover does to the old primary. */
async function readOnlyAndBack(d: RefusalDrill): Promise<Check> {
  const primary = await spawnValkey();
  try {
    await d.admin.replicaof('127.0.0.1', String(primary.port));
    const demoted = await readyWhen(urls(d), (r) => r.reason === 'readonly', 8_000);
    const tally: Record<string, number> = {};
    await send(d, d.services[0] as Service, `ro-put-${d.run}`, tally, 'PUT');
    await d.admin.replicaof('NO', 'ONE');
    const recovered = await readyWhen(urls(d), ready);
    return check(
      `read-only demotion: /readyz says readonly, then ready within ${RECOVER_WITHIN_MS} ms of the promotion back`,
      demoted !== undefined && inTime(recovered),
      `readonly on both ${ms(demoted)} after REPLICAOF; ${listCounts(tally)}; recovered in ${ms(recovered)} after REPLICAOF NO ONE`,
    );
  } finally {
    await primary.stop();
  }
}

/** Phase 7: a Redis 7 ACL user with key and command rights but no channel (`resetchannels`). */
async function aclWithoutChannels(d: RefusalDrill): Promise<Check> {
  await d.admin.call('ACL', 'SETUSER', 'nochan', 'on', '>pw', '~ecc:*', '+@all', 'resetchannels');
  const url = `redis://nochan:pw@127.0.0.1:${d.valkey.port}`;
  const configFor = (coherence: boolean) => ({
    ...d.config,
    valkey: { url, ...FAULT_VALKEY, coherence },
  });
  const started = performance.now();
  const child = spawnService(configFor(true), 0, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  const code = await new Promise<number | null>((ok) => child.once('exit', ok));
  clearTimeout(timer);
  const refusedMs = Math.round(performance.now() - started);
  const named = stderr.includes('&ecc:events:*');
  const id = `acl-${d.run}`;
  const reads0 = d.origin.readsOf(id);
  const s = await startService(configFor(false));
  try {
    const r = await readyz(s.url);
    const tally: Record<string, number> = {};
    const got = (await send(d, s, id, tally)).status;
    await send(d, s, id, tally, 'PUT');
    const reads = d.origin.readsOf(id) - reads0;
    const runs = r.status === 'ready' && r.details?.coherence === false && got === 200;
    return check(
      'ACL without channels: refused at start naming &ecc:events:*; runs with coherence off',
      code === 2 && named && runs && tally['PUT 200'] === 1 && reads === 1,
      `exit ${code} after ${refusedMs} ms ("${stderr.trim().split('\n')[0]}"), names the right: ${named}; with coherence off: /readyz ${r.status}, coherence ${r.details?.coherence}, ${listCounts(tally)}, origin reads ${reads}`,
    );
  } finally {
    await s.stop(5_000);
  }
}

/** Phase 8: both subscribers freeze (no bytes, no FIN); B must still serve A's PUT in time. */
async function frozenSubscriber(d: RefusalDrill): Promise<Check> {
  const [a, b] = d.services as [Service, Service];
  const id = `frozen-${d.run}`;
  const old = (await send(d, a, id)).body;
  await send(d, b, id);
  const frozen = d.proxy.freeze('subscribe');
  const nonce = randomUUID();
  const put = (await send(d, a, id, {}, 'PUT', { nonce })).status;
  const seen = await until(SUBSCRIBER_WITHIN_MS + 3_000, async () => {
    const r = (await send(d, b, id)).body;
    return r !== '' && (JSON.parse(r) as { nonce?: string }).nonce === nonce;
  });
  return check(
    `frozen subscriber: replaced within ${SUBSCRIBER_WITHIN_MS} ms, B serves A's PUT`,
    old !== '' && frozen === 2 && put === 200 && seen !== undefined && seen <= SUBSCRIBER_WITHIN_MS,
    `${frozen} subscriber connection(s) frozen; PUT on A ${put}; B served it after ${ms(seen)} (recovered in ${ms(seen)}); origin reads ${d.origin.readsOf(id)}`,
  );
}

/** The refusal phases, in the order the drill runs them (phases 4 to 8). */
export const REFUSALS = [
  ['OOM, probe in flight', oomWithProbeInFlight],
  ['OOM delete', oomDelete],
  ['read-only and back', readOnlyAndBack],
  ['ACL without channels', aclWithoutChannels],
  ['frozen subscribers', frozenSubscriber],
] as const;
