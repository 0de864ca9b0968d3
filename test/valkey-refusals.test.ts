/**
 * Valkey that *answers* with an error, the way real servers fail most often:
 * out of memory, demoted to a read-only replica, refusing an ACL right. Each
 * test breaks a server of its own on purpose and counts reads at the source.
 */
import { pino } from 'pino';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { startTcpProxy } from '../harness/tcp-proxy.js';
import { spawnValkey, type ValkeyServer } from '../harness/valkey-server.js';
import { createStore } from '../src/index.js';
import { valueKey } from '../src/l2/keys.js';
import {
  errorOf,
  isTombstone,
  metricValue,
  openStore,
  readEnvelope,
  scopedValkey,
  storedValue,
} from './helpers/probe.js';
import { countingLoader, deferred, uniqueTable } from './helpers/store.js';

/** A server of this test's own, resumed and stopped when the test ends. */
async function ownServer(args: string[] = []): Promise<ValkeyServer> {
  const server = await spawnValkey({ args });
  onTestFinished(async () => {
    server.resume();
    await server.stop();
  });
  return server;
}

/** Puts `raw`'s server at maxmemory with noeviction: every write that needs memory answers OOM. */
async function fillUp(raw: ReturnType<typeof scopedValkey>): Promise<void> {
  await raw.config('SET', 'maxmemory-policy', 'noeviction');
  await raw.config('SET', 'maxmemory', '1');
}

/** How many scripts (`EVAL`, `EVALSHA`) the server behind `raw` has run (`INFO commandstats`). */
async function scriptCalls(raw: ReturnType<typeof scopedValkey>): Promise<number> {
  const stats = await raw.info('commandstats');
  return [...stats.matchAll(/^cmdstat_(?:eval|evalsha):calls=(\d+)/gm)].reduce(
    (sum, m) => sum + Number(m[1]),
    0,
  );
}

/** Milliseconds until `check` passes, polled every 20 ms; fails after `withinMs`. */
async function msUntil(check: () => void | Promise<void>, withinMs: number): Promise<number> {
  const started = performance.now();
  await vi.waitFor(check, { timeout: withinMs, interval: 20 });
  return performance.now() - started;
}

function capturedLog() {
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(line) });
  return { logger, text: () => lines.join('') };
}

describe('out of memory (maxmemory, noeviction)', () => {
  it('a PUT is refused and says nothing was written (true: Valkey holds the old value); a DELETE deletes instead of writing a tombstone, answers, and no instance serves the old row; writes work again within 2 s of memory coming back', async () => {
    const server = await ownServer();
    const raw = scopedValkey(server.url);
    const table = uniqueTable('oom');
    const source = countingLoader();
    const a = await openStore({ [table]: { load: source.load } }, { valkey: server.url });
    const b = await openStore({ [table]: { load: source.load } }, { valkey: server.url });
    expect(await a.table(table).get('d1')).toMatchObject({ layer: 'origin', value: { n: 1 } });
    expect(await b.table(table).get('d1')).toMatchObject({ layer: 'l2', value: { n: 1 } });
    expect(await a.table(table).get('w')).toMatchObject({ layer: 'origin', value: { n: 2 } });

    await fillUp(raw);
    const putError = await errorOf(a.table(table).put('w', { put: true }));
    expect(putError.code).toBe('ECC_VALKEY_UNAVAILABLE');
    expect(putError.message).toMatch(/\(oom\).*(nothing was written|was not sent)/);
    expect(await storedValue(raw, table, 'w')).toEqual({ id: 'w', n: 2 });
    expect(a.valkeyHealth().degradedReason).toBe('oom');

    // DELETE: Valkey refuses the tombstone (OOM) but accepts DEL.
    await a.table(table).invalidate('d1');
    expect(await raw.exists(valueKey(table, 'd1'))).toBe(0);
    expect(await metricValue(a, 'echostore_tombstone_fallbacks_total', table)).toBe(1);
    expect(await metricValue(a, 'echostore_invalidations_total', table)).toBe(1);
    // B heard of it: its L1 row is gone; neither instance answers the old row.
    await vi.waitFor(() => expect(b.table(table).stats().l1_entries).toBe(0));
    const [ra, rb] = [await a.table(table).get('d1'), await b.table(table).get('d1')];
    expect(ra).toMatchObject({ layer: 'origin', value: { id: 'd1', n: 3 } });
    expect(rb).toMatchObject({ layer: 'origin', value: { id: 'd1', n: 4 } });
    // Counted at the source: d1 three times (first read, then once per instance), w once.
    expect(source.calls()).toBe(4);

    await raw.config('SET', 'maxmemory', '0');
    const recoveredMs = await msUntil(
      () => expect(a.valkeyHealth().degradedReason).toBeUndefined(),
      2_000,
    );
    expect(recoveredMs).toBeLessThan(2_000);
    await a.table(table).put('w', { put: 'after' });
    expect(await storedValue(raw, table, 'w')).toEqual({ put: 'after' });
  });

  it('the circuit opens on a paused server, the half-open probe meets OOM when it resumes, and the store leaves degraded mode within 2 s of the operator raising maxmemory', async () => {
    const server = await ownServer();
    const raw = scopedValkey(server.url);
    await raw.ping();
    const table = uniqueTable('oom-probe');
    const source = countingLoader();
    const store = await openStore(
      { [table]: { loadTimeoutMs: 500, leaseMs: 1_000, load: source.load } },
      { valkey: { url: server.url, commandTimeoutMs: 150 } },
    );
    const t = store.table(table);

    server.pause();
    for (let i = 0; i < 3; i++) expect((await t.get(`slow-${i}`)).layer).toBe('origin');
    expect(store.valkeyHealth().degradedReason).toBe('unreachable');
    // Queued behind the timed-out commands: the server comes back full.
    const filled = fillUp(raw);
    server.resume();
    await filled;

    // A command that answered late may close the circuit first; the next write, or the
    // store's own probe (every cool-down while open, every 5 s while closed), meets OOM.
    expect((await errorOf(t.put('w', 1))).code).toBe('ECC_VALKEY_UNAVAILABLE');
    await vi.waitFor(() => expect(store.valkeyHealth().degradedReason).toBe('oom'), {
      timeout: 6_000,
    });
    // The probe keeps meeting OOM, and keeps being given back: two more probes run (nothing
    // else runs a script now), and the store is still degraded.
    const scripts = await scriptCalls(raw);
    await vi.waitFor(
      async () => expect(await scriptCalls(raw)).toBeGreaterThanOrEqual(scripts + 2),
      {
        timeout: 6_000,
      },
    );
    expect(store.valkeyHealth().degradedReason).toBe('oom');

    await raw.config('SET', 'maxmemory', '0');
    const recoveredMs = await msUntil(() => expect(store.valkeyReady()).toBe(true), 2_000);
    expect(recoveredMs).toBeLessThan(2_000);
    await t.put('w', { back: true });
    expect(await storedValue(raw, table, 'w')).toEqual({ back: true });
    expect(source.calls()).toBe(3);
  });
});

describe('a flight cancelled while the circuit is open', () => {
  it.each(['here', 'on another instance'])(
    'a DELETE %s of an id loading straight from the source does not keep the store degraded: it is ready within 2 s of Valkey resuming',
    async (where) => {
      const server = await ownServer();
      const table = uniqueTable('cancelled');
      const started = deferred<void>();
      const finish = deferred<void>();
      let loads = 0;
      const load = async (id: string) => {
        loads++;
        if (id === 'p') {
          started.resolve();
          await finish.promise;
        }
        return { id };
      };
      const options = { valkey: { url: server.url, commandTimeoutMs: 150 } };
      const a = await openStore({ [table]: { loadTimeoutMs: 3_000, load } }, options);
      const b = await openStore({ [table]: { load } }, options);
      const t = a.table(table);

      server.pause();
      for (let i = 0; i < 3; i++) await t.get(`slow-${i}`);
      expect(a.valkeyReady()).toBe(false);
      const p = t.get('p');
      await started.promise;
      if (where === 'here') {
        expect((await errorOf(t.invalidate('p'))).code).toBe('ECC_VALKEY_UNAVAILABLE');
        server.resume();
      } else {
        server.resume();
        await b.table(table).invalidate('p');
      }
      const resumedAt = performance.now();
      // Ready while the cancelled load still runs: the load ends only after.
      await vi.waitFor(() => expect(a.valkeyReady()).toBe(true), { timeout: 3_000, interval: 20 });
      expect(performance.now() - resumedAt).toBeLessThan(2_000);
      finish.resolve();
      expect(await p).toMatchObject({ found: true, layer: 'origin' });
      expect(loads).toBe(4);
    },
  );
});

describe('read-only (a demoted primary)', () => {
  it('a demoted server makes the store degraded (readonly) while L1 still answers; on READONLY the client reconnects and follows the proxy to the new primary', async () => {
    const old = await ownServer();
    const next = await ownServer();
    const proxy = await startTcpProxy(old.port);
    onTestFinished(() => proxy.close());
    const table = uniqueTable('readonly');
    const source = countingLoader();
    const store = await openStore({ [table]: { load: source.load } }, { valkey: proxy.url });
    const t = store.table(table);
    expect(await t.get('r')).toMatchObject({ layer: 'origin' });
    expect(await t.get('w')).toMatchObject({ layer: 'origin' });

    // The failover: `old` becomes a replica of `next`, which is the primary now.
    await scopedValkey(old.url).replicaof('127.0.0.1', String(next.port));
    const putError = await errorOf(t.put('w', { put: 1 }));
    expect(putError.message).toMatch(/\(readonly\).*(nothing was written|was not sent)/);
    await vi.waitFor(() => expect(store.valkeyHealth().degradedReason).toBe('readonly'));
    expect(await t.get('r')).toMatchObject({ layer: 'l1' });

    // The name (here the proxy) now points at the new primary.
    proxy.retarget(next.port);
    await vi.waitFor(() => expect(store.valkeyReady()).toBe(true), { timeout: 4_000 });
    await t.put('r', { put: 2 });
    expect(await storedValue(scopedValkey(next.url), table, 'r')).toEqual({ put: 2 });
    expect(source.calls()).toBe(2);
  });

  it('demoted, then promoted back: degraded (readonly) while it is a replica, ready within 2 s of REPLICAOF NO ONE', async () => {
    const server = await ownServer();
    const primary = await ownServer();
    const raw = scopedValkey(server.url);
    const table = uniqueTable('promoted');
    const source = countingLoader();
    const store = await openStore({ [table]: { load: source.load } }, { valkey: server.url });
    const t = store.table(table);
    await t.get('k');

    await raw.replicaof('127.0.0.1', String(primary.port));
    await vi.waitFor(() => expect(store.valkeyHealth().degradedReason).toBe('readonly'), {
      timeout: 7_000,
    });
    expect(await t.get('k')).toMatchObject({ layer: 'l1' });
    expect(await t.get('cold')).toMatchObject({ layer: 'origin' });

    await raw.replicaof('NO', 'ONE');
    const recoveredMs = await msUntil(() => expect(store.valkeyReady()).toBe(true), 2_000);
    expect(recoveredMs).toBeLessThan(2_000);
    await t.put('k', { back: true });
    expect(await storedValue(raw, table, 'k')).toEqual({ back: true });
    expect(source.calls()).toBe(2);
  });
});

describe('ACL rights', () => {
  const users = [
    ...['--user', 'default', 'on', 'nopass', '~*', '&*', '+@all'],
    // The Redis 7 default for a new user: no channel at all.
    ...['--user', 'nochan', 'on', '>pw', '~ecc:*', '+@all', 'resetchannels'],
    ...['--user', 'noscript', 'on', '>pw', '~ecc:*', '&*', '+@all', '-@scripting'],
    ...['--user', 'alice', 'on', '>pw', '~ecc:*', '&*', '+@all'],
    // The line docs/operations.md recommends.
    ...['--user', 'echostore', 'on', '>pw', '~ecc:*', '&ecc:events:*', '+@read', '+@write'],
    ...['+time', '+@scripting', '+@pubsub', '+ping', '+info'],
  ];
  const urlOf = (server: ValkeyServer, user: string) =>
    `redis://${user}:pw@127.0.0.1:${server.port}`;

  it.each([
    ['no Pub/Sub channel (resetchannels)', 'nochan', '&ecc:events:*'],
    ['no scripting (-@scripting)', 'noscript', '+@scripting'],
  ])(
    'a user with %s is refused at start-up, with a message naming the missing right, and nothing is left in Valkey',
    async (_, user, right) => {
      const server = await ownServer(users);
      const raw = scopedValkey(server.url);
      const table = uniqueTable('acl');
      const source = countingLoader();
      const err = await errorOf(
        createStore({ valkey: urlOf(server, user), tables: { [table]: { load: source.load } } }),
      );
      expect(err.code).toBe('ECC_BAD_CONFIG');
      expect(err.message).toContain(right);
      expect(await raw.keys('ecc:*')).toEqual([]);
      expect(source.calls()).toBe(0);
    },
  );

  it('the user docs/operations.md recommends passes the start-up check and reads, writes and deletes, coherent across two stores', async () => {
    const server = await ownServer(users);
    const raw = scopedValkey(server.url);
    const table = uniqueTable('acl-ok');
    const source = countingLoader();
    const open = () =>
      openStore({ [table]: { load: source.load } }, { valkey: urlOf(server, 'echostore') });
    const [a, b] = [await open(), await open()];
    expect(await a.table(table).get('k')).toMatchObject({ layer: 'origin' });
    expect(await b.table(table).get('k')).toMatchObject({ layer: 'l2' });
    await a.table(table).put('k', { put: 1 });
    await vi.waitFor(() => expect(b.table(table).stats().l1_entries).toBe(0));
    await a.table(table).invalidate('k');
    expect(isTombstone(await readEnvelope(raw, table, 'k'))).toBe(true);
    expect(a.valkeyHealth()).toMatchObject({
      degradedReason: undefined,
      maxmemoryPolicy: 'noeviction',
    });
    expect(source.calls()).toBe(1);
  });

  it('with coherence off, a user without channels runs: no Pub/Sub, /readyz says so, a PUT is written and answered as written', async () => {
    const server = await ownServer(users);
    const raw = scopedValkey(server.url);
    const table = uniqueTable('nocoh');
    const source = countingLoader();
    const store = await openStore(
      { [table]: { load: source.load } },
      { valkey: urlOf(server, 'nochan'), coherence: false },
    );
    expect(store.valkeyHealth()).toMatchObject({
      degradedReason: undefined,
      coherence: false,
      subscriber: undefined,
    });
    expect(await store.table(table).get('k')).toMatchObject({ layer: 'origin' });
    await store.table(table).put('k', { put: 1 });
    expect(await storedValue(raw, table, 'k')).toEqual({ put: 1 });
    await store.table(table).invalidate('k');
    expect(isTombstone(await readEnvelope(raw, table, 'k'))).toBe(true);
    expect(source.calls()).toBe(1);
  });

  it('a user that loses its channels while running: a PUT that is stored answers as written (the refused coherence message is logged), never "nothing was written"', async () => {
    const server = await ownServer(users);
    const raw = scopedValkey(server.url);
    const table = uniqueTable('lostchan');
    const log = capturedLog();
    const store = await openStore(
      { [table]: { load: (id) => ({ id }) } },
      { valkey: urlOf(server, 'alice'), logger: log.logger },
    );
    await raw.call('ACL', 'SETUSER', 'alice', 'resetchannels');
    await store.table(table).put('k', { put: 1 });
    expect(await storedValue(raw, table, 'k')).toEqual({ put: 1 });
    const line = log
      .text()
      .split('\n')
      .find((l) => l.includes('refused the coherence message'));
    // Once: a JSON line with a key twice is refused or collapsed by strict readers.
    expect(line?.match(/"table":/g)).toHaveLength(1);
    expect(
      await metricValue(store, 'echostore_valkey_errors_total', table, { op: 'publish' }),
    ).toBe(1);
    // Every later write is refused alike: one warning per 10 s, the rest at debug (not kept here).
    for (let i = 0; i < 5; i++) await store.table(table).put(`k${i}`, { put: i });
    expect(log.text().match(/refused the coherence message/g)).toHaveLength(1);
    expect(
      await metricValue(store, 'echostore_valkey_errors_total', table, { op: 'publish' }),
    ).toBe(6);
  });
  it('a user that loses its channels while running outlives its subscriber: the refused re-subscription is logged, nothing is left unhandled, reads go on', async () => {
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', record);
    onTestFinished(() => {
      process.off('unhandledRejection', record);
    });
    const server = await ownServer(users);
    const raw = scopedValkey(server.url);
    const table = uniqueTable('lostsub');
    const log = capturedLog();
    const source = countingLoader(0);
    const store = await openStore(
      { [table]: { load: source.load } },
      { valkey: urlOf(server, 'alice'), logger: log.logger },
    );
    expect((await store.table(table).get('a')).found).toBe(true);
    await raw.call('ACL', 'SETUSER', 'alice', 'resetchannels');
    // Redis 7 closes a subscriber whose channels were revoked; a restart or a failover would too.
    await raw.client('KILL', 'TYPE', 'pubsub');
    const refusal = 'could not subscribe to the table channels again';
    await vi.waitFor(
      () => expect(unhandled.length > 0 || log.text().includes(refusal)).toBe(true),
      { timeout: 5_000 },
    );
    expect(unhandled).toEqual([]);
    expect(log.text()).toContain(refusal);
    const r = await store.table(table).get('b');
    expect(r.found && r.value).toEqual({ id: 'b', n: 2 });
  });
});

describe('eviction policy', () => {
  it('a policy that may evict leases and tombstones first is warned about and shown in the health details; it is read again on reconnect', async () => {
    const server = await ownServer(['--maxmemory-policy', 'volatile-ttl']);
    const raw = scopedValkey(server.url);
    const log = capturedLog();
    const store = await openStore(
      { [uniqueTable('evict')]: { load: (id) => ({ id }) } },
      { valkey: server.url, logger: log.logger },
    );
    expect(store.valkeyHealth()).toMatchObject({
      maxmemoryPolicy: 'volatile-ttl',
      evictionRisk: expect.stringContaining('leases and DELETE tombstones'),
    });
    expect(log.text()).toContain('maxmemory-policy');

    await raw.config('SET', 'maxmemory-policy', 'allkeys-lru');
    await raw.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    await vi.waitFor(() =>
      expect(store.valkeyHealth()).toMatchObject({
        maxmemoryPolicy: 'allkeys-lru',
        evictionRisk: undefined,
      }),
    );
  });
});
