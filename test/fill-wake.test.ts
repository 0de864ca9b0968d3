// Waiters in other instances wake when the holder's fill lands: the fill's event carries the
// stored value (up to `fillEventMaxBytes`), so a waiter answers from it without reading L2 again.
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { metric, scrape } from '../harness/metrics.js';
import { HOLD_PREFIX, startOrigin } from '../harness/origin.js';
import { startServices } from '../harness/service.js';
import type { Store } from '../src/index.js';
import { decodeEnvelope, encodeEnvelope } from '../src/l2/format.js';
import { eventsChannel, valueKey } from '../src/l2/keys.js';
import { type ScriptName, scriptSha } from '../src/l2/lua.js';
import { metricValue, openStore, watchCommands } from './helpers/probe.js';
import { spawnServer, type TestServer } from './helpers/server.js';
import { countingLoader, deferred, uniqueTable } from './helpers/store.js';

// A server of this file's own: INFO commandstats counts every client's commands.
let server: TestServer;
let raw: Redis;
beforeAll(async () => {
  server = await spawnServer();
  raw = new Redis(server.url, { maxRetriesPerRequest: 0 });
});
afterAll(async () => {
  raw.disconnect();
  await server.stop();
});

/**
 * Scripts run (EVALSHA and EVAL: one round trip each) since the last `CONFIG RESETSTAT`, less
 * the stores' health probes (a script that deletes one hash field: one `HDEL` each).
 */
async function scriptsRun(): Promise<number> {
  const info = (await raw.info('commandstats')) as string;
  const calls = (re: RegExp) => [...info.matchAll(re)].reduce((n, m) => n + Number(m[1]), 0);
  return calls(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm) - calls(/^cmdstat_hdel:calls=(\d+)/gm);
}

/** The scripts whose runs on an id's keys the tests tell apart, by their SHA-1. */
const SCRIPT_OF_SHA = new Map(
  (['readOrLease', 'read', 'readAlone', 'fillAndRelease', 'fillAlone'] as ScriptName[]).map(
    (name) => [scriptSha(name), name],
  ),
);

const MONITOR_ESCAPES: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' };

/** An argument as MONITOR shows it (`\n`, `\"`, `\xHH` escapes) back to its bytes, one char each. */
const unescapeMonitor = (text: string) =>
  text.replace(/\\(x[0-9a-fA-F]{2}|[^x])/g, (_, e: string) =>
    e.length === 3
      ? String.fromCharCode(Number.parseInt(e.slice(1), 16))
      : (MONITOR_ESCAPES[e] ?? e),
  );

/**
 * Watches the scripts run on `table`/`id`'s value key from now on (the server's MONITOR feed,
 * in the order the server ran them). `fills()` counts the fills, `readsAfterFill()` the reads
 * that came after the first fill: a waiter woken by the fill's event runs none. Polls of the
 * contended lease before the fill (one every 250 ms at most: a busy machine may take that long
 * to release the holder) do not count.
 */
async function scriptsOn(table: string, id: string) {
  const watch = await watchCommands(server.url);
  const names = async () =>
    (await watch.carrying(valueKey(table, id))).map(([command = '', script = '']) => {
      const sha = /^eval$/i.test(command)
        ? createHash('sha1').update(unescapeMonitor(script), 'latin1').digest('hex')
        : script;
      return SCRIPT_OF_SHA.get(sha) ?? command;
    });
  const isFill = (name: string) => name === 'fillAndRelease' || name === 'fillAlone';
  return {
    fills: async () => (await names()).filter(isFill).length,
    readsAfterFill: async () => {
      const run = await names();
      const first = run.findIndex(isFill);
      return run.slice(first + 1).filter((n) => /^read/.test(n)).length;
    },
  };
}

const lease = (store: Store, table: string, outcome: string) =>
  metricValue(store, 'echostore_lease_total', table, { outcome });

/**
 * Store `a` takes the lease of a cold id and loads until released; store `b` (its own
 * connections) misses the same id and waits. Counts the scripts run from the moment `b` waits.
 */
async function holderAndWaiter(table: string, policy: Record<string, unknown>, value: unknown) {
  const gate = deferred<void>();
  let loads = 0;
  const tables = (load: () => Promise<unknown>) => ({
    [table]: { leaseMs: 30_000, loadTimeoutMs: 20_000, ...policy, load },
  });
  const a = await openStore(
    tables(async () => {
      loads++;
      await gate.promise;
      return value;
    }),
    { valkey: server.url },
  );
  const b = await openStore(
    tables(async () => {
      loads++;
      return 'the waiter loaded';
    }),
    { valkey: server.url },
  );
  const holding = a.table(table).get('x');
  await vi.waitFor(async () => expect(await lease(a, table, 'acquired')).toBe(1));
  const waiting = b.table(table).get('x');
  await vi.waitFor(async () => expect(await lease(b, table, 'contended')).toBe(1));
  const scripts = await scriptsOn(table, 'x');
  gate.resolve();
  const [held, waited] = await Promise.all([holding, waiting]);
  return {
    a,
    b,
    held,
    waited,
    fills: await scripts.fills(),
    reads: await scripts.readsAfterFill(),
    loads,
  };
}

interface Case {
  policy: Record<string, unknown>;
  size: number;
  /** The waiter's reads of L2 after the holder's fill: none when the fill's event carried the value. */
  readsAfterFill: number;
  woken: number;
}

async function wakes(c: Case): Promise<void> {
  const table = uniqueTable('wake');
  // JSON escapes, a control character, non-ASCII and a lone surrogate survive the event's JSON.
  const value = { pad: 'p'.repeat(c.size), odd: '/"\\\n\t\u0001é😀\u2028\ud800</x>' };
  const r = await holderAndWaiter(table, c.policy, value);
  expect(r.loads).toBe(1);
  expect(r.fills).toBe(1);
  expect(r.reads).toBe(c.readsAfterFill);
  expect(await lease(r.b, table, 'woken')).toBe(c.woken);
  // What the waiter answered is exactly what L2 holds at that version.
  const stored = decodeEnvelope((await raw.get(valueKey(table, 'x'))) as string);
  expect(r.waited.found && r.waited.json).toBe(stored?.json);
  expect(r.waited.found && r.waited.version).toBe(stored?.version);
  expect(r.waited.found && r.waited.value).toEqual(value);
  expect(r.held.found && r.held.json).toBe(stored?.json);
  expect(r.waited.layer).toBe('l2');
}

describe('waiters wake when the fill lands', () => {
  it('a waiter in another store answers from the fill event exactly what L2 holds at that version, with no second read', () =>
    wakes({ policy: {}, size: 100, readsAfterFill: 0, woken: 1 }));

  it('a waiter reads L2 once more after an event with the version only (fillEventMaxBytes 0)', () =>
    wakes({ policy: { fillEventMaxBytes: 0 }, size: 100, readsAfterFill: 1, woken: 0 }));

  it('a waiter reads L2 once more after an event with the version only (a value longer than fillEventMaxBytes)', () =>
    wakes({ policy: { fillEventMaxBytes: 1024 }, size: 2048, readsAfterFill: 1, woken: 0 }));

  it('a waiter without a subscriber answers by its bounded poll read (within 250 ms of the fill)', async () => {
    const table = uniqueTable('wake-nosub');
    const source = countingLoader(0);
    const gate = deferred<void>();
    const a = await openStore(
      {
        [table]: {
          leaseMs: 30_000,
          load: async (id) => {
            await gate.promise;
            return source.load(id, { signal: new AbortController().signal });
          },
        },
      },
      { valkey: server.url },
    );
    const b = await openStore(
      { [table]: { leaseMs: 30_000, load: source.load } },
      { valkey: server.url, coherence: false },
    );
    const holding = a.table(table).get('x');
    await vi.waitFor(async () => expect(await lease(a, table, 'acquired')).toBe(1));
    const waiting = b.table(table).get('x');
    await vi.waitFor(async () => expect(await lease(b, table, 'contended')).toBe(1));
    gate.resolve();
    await holding;
    const filledAt = performance.now();
    const r = await waiting;
    expect(performance.now() - filledAt).toBeLessThan(400);
    expect(r.found && r.value).toEqual({ id: 'x', n: 1 });
    expect(source.calls()).toBe(1);
    expect(await lease(b, table, 'woken')).toBe(0);
  });

  it("a fill event not newer than what the waiter's last read saw is not taken (a DELETE's tombstone)", async () => {
    const table = uniqueTable('wake-old');
    const gate = deferred<void>();
    const a = await openStore(
      {
        [table]: {
          leaseMs: 30_000,
          load: async () => {
            await gate.promise;
            return { from: 'the holder' };
          },
        },
      },
      { valkey: server.url },
    );
    const b = await openStore(
      { [table]: { leaseMs: 30_000, load: () => ({ from: 'the waiter' }) } },
      { valkey: server.url },
    );
    await a.table(table).invalidate('x');
    const tombstone = decodeEnvelope((await raw.get(valueKey(table, 'x'))) as string);
    expect(tombstone?.negative).toBe(true);
    const holding = a.table(table).get('x');
    await vi.waitFor(async () => expect(await lease(a, table, 'acquired')).toBe(1));
    const waiting = b.table(table).get('x');
    await vi.waitFor(async () => expect(await lease(b, table, 'contended')).toBe(1));
    // A fill of a version below the tombstone the waiter read (an event that overtook
    // nothing: as if it were delivered after the DELETE that replaced it).
    const version = (tombstone?.version ?? 0) - 1;
    const old = encodeEnvelope({
      value: { from: 'an overtaken fill' },
      json: JSON.stringify({ from: 'an overtaken fill' }),
      version,
      softExpiresAt: Date.now() + 60_000,
      hardExpiresAt: Date.now() + 60_000,
      deltaMs: 1,
      negative: false,
      born: Date.now() * 1000,
      fingerprint: '',
    });
    const message = JSON.stringify({ k: 'fill', id: 'x', v: version, e: old });
    await raw.config('RESETSTAT');
    expect(await raw.publish(eventsChannel(table), message)).toBeGreaterThan(0);
    // Refused, it asks Valkey again (still contended); then the holder fills.
    await vi.waitFor(async () => expect(await scriptsRun()).toBe(1));
    gate.resolve();
    const r = await waiting;
    expect(r.found && r.value).toEqual({ from: 'the holder' });
    expect(await lease(b, table, 'woken')).toBe(1);
    await holding;
  });

  it('a PUT after a waiter answered from the fill event replaces the value there (newer-wins)', async () => {
    const table = uniqueTable('wake-put');
    const r = await holderAndWaiter(table, {}, { n: 1 });
    expect(await lease(r.b, table, 'woken')).toBe(1);
    const b = r.b.table(table);
    expect(((await b.get('x')) as { layer: string }).layer).toBe('l1');
    await r.a.table(table).put('x', { n: 2 });
    await vi.waitFor(async () => {
      const got = await b.get('x');
      expect(got.found && got.value).toEqual({ n: 2 });
    });
  });

  // Three service processes start inside the test: on a busy machine that alone takes seconds.
  it("another instance's fill event drops an older L1 row here, whatever the id's characters", async () => {
    const table = uniqueTable('wake-drop');
    const store = await openStore({ [table]: { load: (id) => ({ id }) } }, { valkey: server.url });
    const t = store.table(table);
    // A plain id (its event read from the head alone) and ids whose JSON has escapes (parsed whole).
    for (const id of ['plain', 'q"uote', 'back\\slash', 'é/ü']) {
      await t.get(id);
      expect(((await t.get(id)) as { layer: string }).layer).toBe('l1');
      const stored = decodeEnvelope((await raw.get(valueKey(table, id))) as string);
      const v = (stored?.version ?? 0) + 1;
      const message = JSON.stringify({ k: 'fill', id, v, e: 'E3|not read' });
      expect(await raw.publish(eventsChannel(table), message)).toBeGreaterThan(0);
      await vi.waitFor(async () =>
        expect(((await t.get(id)) as { layer: string }).layer).not.toBe('l1'),
      );
    }
  });

  it('three service instances, one cold id: one origin read, and each waiter answers from the fill event', {
    timeout: 60_000,
  }, async () => {
    const origin = await startOrigin(0);
    onTestFinished(() => origin.close());
    const table = uniqueTable('wake-svc');
    const config = {
      valkey: { url: server.url },
      log: { level: 'warn' },
      tables: { [table]: { source: { kind: 'http', url: origin.template }, leaseMs: 30_000 } },
    };
    const [holder, ...waiters] = await startServices(3, config);
    onTestFinished(async () => {
      await Promise.all([holder, ...waiters].map((s) => s?.stop()));
    });
    const id = `${HOLD_PREFIX}x`;
    const get = (s: { url: string }) =>
      fetch(`${s.url}/v1/tables/${table}/items/${id}`).then(async (r) => ({
        status: r.status,
        body: await r.text(),
      }));
    const lease = async (s: { url: string }, outcome: string) =>
      metric(await scrape(s.url), 'echostore_lease_total', { table, outcome }) ?? 0;
    const holding = get(holder as { url: string });
    expect(await origin.seen(id, 10_000)).toBe(true);
    const waiting = waiters.map((w) => get(w));
    for (const w of waiters)
      await vi.waitFor(async () => expect(await lease(w, 'contended')).toBe(1));
    const scripts = await scriptsOn(table, id);
    origin.release(id);
    const answers = await Promise.all([holding, ...waiting]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(new Set(answers.map((a) => a.body)).size).toBe(1);
    expect(origin.readsOf(id)).toBe(1);
    // The holder's fillAndRelease, and no waiter asked Valkey again after it.
    expect(await scripts.fills()).toBe(1);
    expect(await scripts.readsAfterFill()).toBe(0);
    for (const w of waiters) expect(await lease(w, 'woken')).toBe(1);
  });
});
