/**
 * The fault drill's phases where Valkey *answers* with an error (out of
 * memory, read-only, an ACL without channels) or a subscriber stops
 * delivering. Each provokes the fault on real processes, measures how long the
 * instances took to come back ("recovered in N ms"), counts the reads of its
 * own ids at the origin, and returns its checks.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { Origin } from '../../harness/origin.js';
import { type Service, spawnService, startService } from '../../harness/service.js';
import type { TcpProxy } from '../../harness/tcp-proxy.js';
import { spawnValkey, type ValkeyServer } from '../../harness/valkey-server.js';
import { itemUrl, type Readyz, readyz, timed } from './http.js';
import { bump, type Check, listCounts } from './report.js';

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
  /** A service config for a Valkey URL and a coherence setting. */
  configFor(url: string, coherence: boolean): object;
  /** Sees every process started (killed if the drill exits early). */
  track(child: import('node:child_process').ChildProcess): void;
  /** A unique suffix for this run's ids. */
  run: string;
  requestTimeoutMs: number;
}

/** How long the store may take to leave degraded mode after Valkey recovers from a refusal. */
export const RECOVER_WITHIN_MS = 2_000;
/** How long a frozen subscriber may go unnoticed (and L1 unflushed). */
export const SUBSCRIBER_WITHIN_MS = 5_000;

/** Ms until every instance's `/readyz` satisfies `ok` (polled every 25 ms), or undefined after `withinMs`. */
async function untilAll(
  services: Service[],
  ok: (r: Readyz) => boolean,
  withinMs: number,
): Promise<number | undefined> {
  const started = performance.now();
  while (performance.now() - started < withinMs) {
    const all = await Promise.all(services.map((s) => readyz(s.url)));
    if (all.every(ok)) return Math.round(performance.now() - started);
    await sleep(25);
  }
  return undefined;
}

const ready = (r: Readyz) => r.status === 'ready';
const ms = (x: number | undefined) => (x === undefined ? 'never' : `${x} ms`);

/** A write's HTTP status, tallied with its error code as `PUT 200`, `DELETE 503 ECC_VALKEY_UNAVAILABLE`, … */
async function write(
  method: 'PUT' | 'DELETE',
  d: RefusalDrill,
  service: Service,
  id: string,
  tally: Record<string, number>,
): Promise<number> {
  const json = method === 'PUT' ? { id } : undefined;
  const r = await timed(itemUrl(service.url, d.table, id), d.requestTimeoutMs, method, json);
  bump(
    tally,
    r.status === 0 ? `${method} no answer` : `${method} ${r.status}${r.code ? ` ${r.code}` : ''}`,
  );
  return r.status;
}

/** GETs `id` on `service`; the body, or '' when not 200. */
async function body(d: RefusalDrill, service: Service, id: string): Promise<string> {
  const r = await timed(itemUrl(service.url, d.table, id), d.requestTimeoutMs);
  return r.status === 200 ? r.body : '';
}

async function fillUp(admin: Redis): Promise<void> {
  await admin.config('SET', 'maxmemory-policy', 'noeviction');
  await admin.config('SET', 'maxmemory', '1');
}

/**
 * The circuit opens while Valkey is paused; Valkey comes back at maxmemory
 * (noeviction), so the half-open probe meets OOM; the operator raises
 * maxmemory: both instances must be ready within {@link RECOVER_WITHIN_MS}.
 */
export async function oomWithProbeInFlight(d: RefusalDrill, notes: string[]): Promise<Check> {
  const [a, b] = d.services as [Service, Service];
  d.valkey.pause();
  const opened = await untilAll(d.services, (r) => r.status === 'degraded', 5_000);
  // Sent while paused: run when it resumes, before any probe.
  const filled = fillUp(d.admin);
  d.valkey.resume();
  await filled;
  const oom = await untilAll(d.services, (r) => r.reason === 'oom', 8_000);
  const tally: Record<string, number> = {};
  await write('PUT', d, a, `oom-put-${d.run}`, tally);
  // The probe keeps meeting OOM, and keeps being given back.
  await sleep(1_500);
  const stillOom = (await Promise.all([a, b].map((s) => readyz(s.url)))).every(
    (r) => r.reason === 'oom',
  );
  await d.admin.config('SET', 'maxmemory', '0');
  const recovered = await untilAll(d.services, ready, 5_000);
  notes.push(
    `degraded ${ms(opened)} after SIGSTOP; reason oom on both ${ms(oom)} after SIGCONT; ${listCounts(tally)}; ` +
      `recovered in ${ms(recovered)} after maxmemory was raised`,
  );
  return {
    name: `OOM with a probe in flight: /readyz says oom, then ready within ${RECOVER_WITHIN_MS} ms of maxmemory being raised`,
    pass:
      oom !== undefined && stillOom && recovered !== undefined && recovered <= RECOVER_WITHIN_MS,
    detail: `oom after ${ms(oom)}, still oom 1.5 s later: ${stillOom}, recovered in ${ms(recovered)}`,
  };
}

/**
 * At maxmemory (noeviction) a DELETE cannot write its tombstone: it must fall
 * back to deleting, answer 204, and neither instance may serve the old row.
 */
export async function oomDelete(d: RefusalDrill, notes: string[]): Promise<Check> {
  const [a, b] = d.services as [Service, Service];
  const id = `oom-del-${d.run}`;
  const old = await body(d, a, id);
  const oldOnB = await body(d, b, id);
  await fillUp(d.admin);
  const tally: Record<string, number> = {};
  await write('PUT', d, a, id, tally);
  const deleted = await write('DELETE', d, a, id, tally);
  const started = performance.now();
  let fresh: [string, string] = ['', ''];
  while (performance.now() - started < 2_000) {
    fresh = [await body(d, a, id), await body(d, b, id)];
    if (fresh.every((f) => f !== '' && f !== old)) break;
    await sleep(25);
  }
  const goneMs = Math.round(performance.now() - started);
  const noOld = fresh.every((f) => f !== '' && f !== old);
  await d.admin.config('SET', 'maxmemory', '0');
  const recovered = await untilAll(d.services, ready, 5_000);
  const reads = d.origin.readsOf(id);
  notes.push(
    `${listCounts(tally)}; old row gone from A and B ${noOld ? `within ${goneMs} ms` : 'NOT'}; ` +
      `origin reads of the id: ${reads}; recovered in ${ms(recovered)} after maxmemory was raised`,
  );
  return {
    name: `OOM delete: DELETE answers 204, no instance serves the old row, ready within ${RECOVER_WITHIN_MS} ms of maxmemory being raised`,
    pass:
      old !== '' &&
      old === oldOnB &&
      deleted === 204 &&
      noOld &&
      recovered !== undefined &&
      recovered <= RECOVER_WITHIN_MS,
    detail: `DELETE ${deleted}, old row gone: ${noOld}, origin reads ${reads} (first read, then A and B each read it again), recovered in ${ms(recovered)}`,
  };
}

/**
 * The server is demoted to a read-only replica (what a failover does to the
 * old primary): both instances must say degraded (readonly), and be ready
 * within {@link RECOVER_WITHIN_MS} of its promotion back.
 */
export async function readOnlyAndBack(d: RefusalDrill, notes: string[]): Promise<Check> {
  const [a] = d.services as [Service];
  const primary = await spawnValkey({ track: d.track });
  try {
    await d.admin.replicaof('127.0.0.1', String(primary.port));
    const demoted = await untilAll(d.services, (r) => r.reason === 'readonly', 8_000);
    const tally: Record<string, number> = {};
    await write('PUT', d, a, `ro-put-${d.run}`, tally);
    await d.admin.replicaof('NO', 'ONE');
    const recovered = await untilAll(d.services, ready, 5_000);
    notes.push(
      `reason readonly on both ${ms(demoted)} after REPLICAOF; ${listCounts(tally)}; ` +
        `recovered in ${ms(recovered)} after REPLICAOF NO ONE`,
    );
    return {
      name: `read-only demotion: /readyz says readonly, then ready within ${RECOVER_WITHIN_MS} ms of the promotion back`,
      pass: demoted !== undefined && recovered !== undefined && recovered <= RECOVER_WITHIN_MS,
      detail: `readonly after ${ms(demoted)}, recovered in ${ms(recovered)}`,
    };
  } finally {
    await primary.stop();
  }
}

/** Starts the service on `config` expecting it to refuse: its exit code and stderr, within 15 s. */
async function refusedStart(
  config: object,
  track: RefusalDrill['track'],
): Promise<{ code: number | null; stderr: string; ms: number }> {
  const started = performance.now();
  const child = spawnService(config, 0, { stdio: ['ignore', 'ignore', 'pipe'] });
  track(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  const code = await new Promise<number | null>((ok) => child.once('exit', (c) => ok(c)));
  clearTimeout(timer);
  return { code, stderr: stderr.trim(), ms: Math.round(performance.now() - started) };
}

/**
 * A Redis 7 ACL user with key and command rights but no channel
 * (`resetchannels`): the service must refuse to start, naming the right;
 * with `coherence: false` it must run, say so in `/readyz`, and write.
 */
export async function aclWithoutChannels(d: RefusalDrill, notes: string[]): Promise<Check> {
  await d.admin.call('ACL', 'SETUSER', 'nochan', 'on', '>pw', '~ecc:*', '+@all', 'resetchannels');
  const url = `redis://nochan:pw@127.0.0.1:${d.valkey.port}`;
  const refused = await refusedStart(d.configFor(url, true), d.track);
  const named = refused.stderr.includes('&ecc:events:*');
  const id = `acl-${d.run}`;
  const reads0 = d.origin.readsOf(id);
  const s = await startService(d.configFor(url, false));
  d.track(s.process);
  try {
    const r = await readyz(s.url);
    const tally: Record<string, number> = {};
    const got = await timed(itemUrl(s.url, d.table, id), d.requestTimeoutMs);
    bump(tally, `GET ${got.status}`);
    await write('PUT', d, s, id, tally);
    const reads = d.origin.readsOf(id) - reads0;
    notes.push(
      `with channels required: exit ${refused.code} after ${refused.ms} ms: "${refused.stderr.split('\n')[0]}"; ` +
        `with coherence off: /readyz ${r.status}, coherence ${r.details?.coherence}; ${listCounts(tally)}; origin reads ${reads}`,
    );
    return {
      name: 'ACL without channels: refused at start naming &ecc:events:*; runs with coherence off',
      pass:
        refused.code === 2 &&
        named &&
        r.status === 'ready' &&
        r.details?.coherence === false &&
        got.status === 200 &&
        tally['PUT 200'] === 1 &&
        reads === 1,
      detail: `exit ${refused.code}, names the right: ${named}; coherence off: ${r.status}, GET ${got.status}, ${listCounts(tally)}, origin reads ${reads}`,
    };
  } finally {
    await s.stop(5_000);
  }
}

/**
 * Both instances' subscriber connections freeze (no bytes, no FIN); a PUT on
 * A must be served by B within {@link SUBSCRIBER_WITHIN_MS}: the heartbeat
 * finds the dead subscriber, replaces it, and B flushes its L1.
 */
export async function frozenSubscriber(d: RefusalDrill, notes: string[]): Promise<Check> {
  const [a, b] = d.services as [Service, Service];
  const id = `frozen-${d.run}`;
  const old = await body(d, a, id);
  await body(d, b, id);
  const frozen = d.proxy.freeze('subscribe');
  const nonce = randomUUID();
  const put = await timed(itemUrl(a.url, d.table, id), d.requestTimeoutMs, 'PUT', { nonce });
  const started = performance.now();
  let seen: number | undefined;
  while (performance.now() - started < SUBSCRIBER_WITHIN_MS + 3_000) {
    const r = await body(d, b, id);
    if (r !== '' && (JSON.parse(r) as { nonce?: string }).nonce === nonce) {
      seen = Math.round(performance.now() - started);
      break;
    }
    await sleep(25);
  }
  const reads = d.origin.readsOf(id);
  notes.push(
    `${frozen} subscriber connection(s) frozen; PUT on A ${put.status}; B served the new value ${seen === undefined ? 'never' : `after ${seen} ms`} (recovered in ${ms(seen)}); origin reads of the id: ${reads}`,
  );
  return {
    name: `frozen subscriber: replaced within ${SUBSCRIBER_WITHIN_MS} ms, B serves A's PUT`,
    pass:
      old !== '' &&
      frozen === 2 &&
      put.status === 200 &&
      seen !== undefined &&
      seen <= SUBSCRIBER_WITHIN_MS,
    detail: `${frozen} frozen, B saw the PUT after ${ms(seen)}, origin reads ${reads}`,
  };
}
