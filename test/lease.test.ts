// @module-tag cluster (a law test: npm run test:cluster runs it again on a local 3+3 cluster)
import { fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { StreamLease } from '../src/changes/lease.js';
import type { Store } from '../src/index.js';
import { leaseKey, valueKey } from '../src/l2/keys.js';
import {
  errorOf,
  metricValue,
  openStore,
  plantEnvelope,
  readEnvelope,
  scopedValkey,
  storedValue,
  watchCommands,
} from './helpers/probe.js';
import { spawnServer } from './helpers/server.js';
import { countingLoader, deferred, uniqueTable, valkeyTarget } from './helpers/store.js';

/** The `echostore_lease_total` count of `outcome` for `table` on `store`. */
const leaseCount = (store: Store, table: string, outcome: string) =>
  metricValue(store, 'echostore_lease_total', table, { outcome });

describe('fleet lease', () => {
  it('two stores with separate connections reading one cold key cause one load', async () => {
    const table = uniqueTable('fleet');
    const source = countingLoader(50);
    const a = await openStore({ [table]: { load: source.load } });
    const b = await openStore({ [table]: { load: source.load } });
    expect(a.valkey).not.toBe(b.valkey);
    const reads = [a, b].flatMap((s) =>
      Array.from({ length: 100 }, () => s.table(table).get('cold')),
    );
    const results = await Promise.all(reads);
    expect(source.calls()).toBe(1);
    expect(new Set(results.map((r) => (r.found ? r.json : '-'))).size).toBe(1);
    const count = async (outcome: string) =>
      (await metricValue(a, 'echostore_lease_total', table, { outcome: outcome })) +
      (await metricValue(b, 'echostore_lease_total', table, { outcome: outcome }));
    expect(await count('acquired')).toBe(1);
    expect(await count('contended')).toBe(1);
    expect(await count('takeover')).toBe(0);
    const sources = new Set(results.map((r) => r.layer));
    expect(sources).toEqual(new Set(['origin', 'l2']));
  });

  it('a failed load releases the lease so the other instance loads at once, not after leaseMs', async () => {
    const table = uniqueTable('fleet-err');
    const gate = deferred<void>();
    const started = deferred<void>();
    // Failures not remembered (errorTtlMs: 0; remembered-failures.test.ts covers that the
    // waiter then gets the failure instead of loading).
    const a = await openStore({
      [table]: {
        leaseMs: 30_000,
        loadTimeoutMs: 20_000,
        errorTtlMs: 0,
        load: async () => {
          started.resolve();
          await gate.promise;
          throw new Error('source down');
        },
      },
    });
    const source = countingLoader(10);
    const b = await openStore({
      [table]: { leaseMs: 30_000, loadTimeoutMs: 20_000, errorTtlMs: 0, load: source.load },
    });
    const failing = errorOf(a.table(table).get('x'));
    await started.promise;
    const waiting = b.table(table).get('x');
    await vi.waitFor(async () =>
      expect(await metricValue(b, 'echostore_lease_total', table, { outcome: 'contended' })).toBe(
        1,
      ),
    );
    gate.resolve();
    expect((await failing).code).toBe('ECC_LOAD_FAILED');
    const r = await waiting;
    expect(r.found && r.value).toEqual({ id: 'x', n: 1 });
    expect(source.calls()).toBe(1);
    // A released lease is not a takeover: the holder was alive and said it had failed.
    expect(await metricValue(b, 'echostore_lease_total', table, { outcome: 'takeover' })).toBe(0);
    expect(await metricValue(b, 'echostore_lease_total', table, { outcome: 'acquired' })).toBe(1);
  });

  it('a holder SIGKILLed while holding the lease costs exactly one takeover load, and every waiter is answered', async () => {
    const holder = fileURLToPath(new URL('./fixtures/lease-holder.mjs', import.meta.url));
    const built = fileURLToPath(new URL('../dist/src/index.js', import.meta.url));
    expect(existsSync(built), 'run `npm run build` before the tests').toBe(true);
    const table = uniqueTable('takeover');
    const target = JSON.stringify(valkeyTarget());
    const child = fork(holder, [target, table, 'hot'], { stdio: 'ignore' });
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) => reject(new Error(`lease holder exited early (${code})`)));
    });
    const source = countingLoader(20);
    const policy = {
      leaseMs: 1_500,
      loadTimeoutMs: 1_000,
      waitTimeoutMs: 8_000,
      load: source.load,
    };
    const a = await openStore({ [table]: policy });
    const b = await openStore({ [table]: policy });
    const c = await openStore({ [table]: policy });
    const reads = [a, b, c].flatMap((s) =>
      Array.from({ length: 50 }, () => s.table(table).get('hot')),
    );
    // Every instance waits on the holder's lease; none loads while it lives.
    await vi.waitFor(async () => {
      for (const s of [a, b, c]) {
        expect(await metricValue(s, 'echostore_lease_total', table, { outcome: 'contended' })).toBe(
          1,
        );
      }
    });
    expect(source.calls()).toBe(0);
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    const results = await Promise.all(reads);
    expect(source.calls()).toBe(1);
    expect(results).toHaveLength(150);
    expect(new Set(results.map((r) => (r.found ? r.json : '-'))).size).toBe(1);
    let takeovers = 0;
    for (const s of [a, b, c]) {
      takeovers += await metricValue(s, 'echostore_lease_total', table, { outcome: 'takeover' });
    }
    expect(takeovers).toBe(1);
  });

  it('a fill whose lease expired is refused and does not overwrite the newer value', async () => {
    const table = uniqueTable('lost');
    const raw = scopedValkey();
    const slowGate = deferred<void>();
    const started = deferred<void>();
    const slow = await openStore({
      [table]: {
        load: async () => {
          started.resolve();
          await slowGate.promise;
          return { from: 'slow' };
        },
      },
    });
    const fast = await openStore({ [table]: { load: () => ({ from: 'fast' }) } });
    const slowRead = slow.table(table).get('k');
    await started.promise;
    // The slow loader outlives its lease: make the lease expire now.
    expect(await raw.pexpire(`ecc:${table}:{k}:lease`, 1)).toBe(1);
    await vi.waitFor(async () => expect(await raw.exists(`ecc:${table}:{k}:lease`)).toBe(0), {
      interval: 5,
    });
    const fastRead = await fast.table(table).get('k');
    expect(fastRead.found && fastRead.value).toEqual({ from: 'fast' });
    slowGate.resolve();
    const slowAnswer = await slowRead;
    expect(slowAnswer.found && slowAnswer.value).toEqual({ from: 'slow' });
    expect(await storedValue(raw, table, 'k')).toEqual({ from: 'fast' });
    // The slow read is answered as its fill is sent; the refusal lands after.
    await vi.waitFor(async () =>
      expect(await metricValue(slow, 'echostore_lease_total', table, { outcome: 'lost' })).toBe(1),
    );
    // The refused value was not kept in L1 either: the next read is the newer value.
    const again = await slow.table(table).get('k');
    expect(again.found && again.value).toEqual({ from: 'fast' });
  });

  it('a holder that waits for a loader slot longer than leaseMs renews its lease: the other instance waits for its fill and loads nothing', async () => {
    const table = uniqueTable('renew');
    const slot = deferred<void>();
    const busy = deferred<void>();
    const policy = { leaseMs: 600, loadTimeoutMs: 5_000, waitTimeoutMs: 5_000 };
    const a = await openStore({
      [table]: {
        ...policy,
        maxConcurrentLoads: 1,
        maxQueueDelayMs: 5_000,
        // The pool alone: the held 'busy' load never leaves it for the overdue partition.
        maxOverdueLoads: 0,
        load: async (id) => {
          if (id === 'busy') {
            busy.resolve();
            await slot.promise;
          }
          return { id, from: 'a' };
        },
      },
    });
    const source = countingLoader(0);
    const b = await openStore({ [table]: { ...policy, load: source.load } });
    // A's only loader slot is taken, so A's load of k holds the lease while it queues.
    const occupying = a.table(table).get('busy');
    await busy.promise;
    const holder = a.table(table).get('k');
    await vi.waitFor(() => expect(a.table(table).stats().loads_queued).toBe(1));
    // A renews both its leases (busy's and k's) every 200 ms: eighteen renewals span three
    // lease lifetimes, and the lease is still A's.
    await vi.waitFor(
      async () => expect(await leaseCount(a, table, 'renewed')).toBeGreaterThanOrEqual(18),
      { timeout: 5_000 },
    );
    const waiting = b.table(table).get('k');
    await vi.waitFor(async () =>
      expect(await metricValue(b, 'echostore_lease_total', table, { outcome: 'contended' })).toBe(
        1,
      ),
    );
    slot.resolve();
    await occupying;
    expect(await holder).toMatchObject({ value: { id: 'k', from: 'a' }, layer: 'origin' });
    expect(await waiting).toMatchObject({ value: { id: 'k', from: 'a' }, layer: 'l2' });
    expect(source.calls()).toBe(0);
    expect(
      await metricValue(a, 'echostore_lease_total', table, { outcome: 'renewed' }),
    ).toBeGreaterThanOrEqual(2);
  });

  it('no waiter waits past waitTimeoutMs for a holder that never fills', async () => {
    const table = uniqueTable('wait');
    const raw = scopedValkey();
    await raw.set(`ecc:${table}:{w}:lease`, 'someone-else', 'PX', 20_000);
    const source = countingLoader(30);
    const s = await openStore({ [table]: { waitTimeoutMs: 300, load: source.load } });
    const started = performance.now();
    const errors = await Promise.all(
      Array.from({ length: 20 }, () => errorOf(s.table(table).get('w'))),
    );
    const elapsedMs = performance.now() - started;
    expect(errors.every((e) => e.code === 'ECC_WAIT_TIMEOUT')).toBe(true);
    expect(elapsedMs).toBeGreaterThanOrEqual(290);
    expect(elapsedMs).toBeLessThan(5_000);
    expect(source.calls()).toBe(0);
  });

  it('a lease command that times out on a paused server neither blocks the key past leaseMs nor causes a second load', async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const table = uniqueTable('paused');
    const source = countingLoader(5);
    const policy = { leaseMs: 1_000, loadTimeoutMs: 500, load: source.load };
    const a = await openStore(
      { [table]: policy },
      { valkey: { url: server.url, commandTimeoutMs: 200 } },
    );
    const pid = server.process?.pid as number;
    process.kill(pid, 'SIGSTOP');
    let resumed = false;
    onTestFinished(() => {
      if (!resumed) process.kill(pid, 'SIGCONT');
    });
    const r = await a.table(table).get('p');
    expect(r.found && r.layer).toBe('origin');
    expect(source.calls()).toBe(1);
    process.kill(pid, 'SIGCONT');
    resumed = true;
    const raw = scopedValkey(server.url);
    await raw.ping();
    const b = await openStore(
      { [table]: policy },
      { valkey: { url: server.url, commandTimeoutMs: 1_000 } },
    );
    const fromB = await b.table(table).get('p');
    expect(fromB.found && fromB.value).toEqual(r.found && r.value);
    expect(source.calls()).toBe(1);
    const leftMs = await raw.pttl(`ecc:${table}:{p}:lease`);
    expect(leftMs).toBeLessThanOrEqual(1_000);
  });
});

describe('lease renewal (a lease lives only while its holder does)', () => {
  it('a live loader slower than leaseMs keeps its lease: no takeover, one source read', async () => {
    const table = uniqueTable('renew');
    let loads = 0;
    const started = deferred<void>();
    const renewals = deferred<void>();
    const slow = {
      leaseMs: 300,
      loadTimeoutMs: 5_000,
      load: async () => {
        loads++;
        started.resolve();
        // Slower than leaseMs: the load ends once A has renewed for three lease lifetimes.
        await renewals.promise;
        return { loads };
      },
    };
    const a = await openStore({ [table]: slow });
    const b = await openStore({ [table]: slow });
    void vi
      .waitFor(
        async () => expect(await leaseCount(a, table, 'renewed')).toBeGreaterThanOrEqual(9),
        { timeout: 5_000 },
      )
      .then(() => renewals.resolve(), renewals.reject);
    const first = a.table(table).get('k');
    await started.promise;
    const second = await b.table(table).get('k');
    expect(second.found && second.value).toEqual({ loads: 1 });
    expect((await first).found).toBe(true);
    expect(loads).toBe(1);
    expect(
      await metricValue(a, 'echostore_lease_total', table, { outcome: 'renewed' }),
    ).toBeGreaterThanOrEqual(2);
    expect(await metricValue(b, 'echostore_lease_total', table, { outcome: 'takeover' })).toBe(0);
  });

  it('a renewal that finds the lease gone fences the load: its answer is served, and no fill is sent', async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const commands = await watchCommands(server.url);
    const table = uniqueTable('fenced');
    const raw = scopedValkey(server.url);
    const started = deferred<void>();
    const gate = deferred<void>();
    const a = await openStore(
      {
        [table]: {
          leaseMs: 300,
          load: async () => {
            started.resolve();
            await gate.promise;
            return { late: 'gone-7f3c' };
          },
        },
      },
      { valkey: { url: server.url } },
    );
    const t = a.table(table);
    const reading = t.get('k');
    await started.promise;
    // The lease is lost (as when it expired while Valkey was unreachable).
    expect(await raw.del(leaseKey(table, 'k'))).toBe(1);
    await vi.waitFor(async () => expect(await leaseCount(a, table, 'expired')).toBe(1));
    gate.resolve();
    const r = await reading;
    expect(r.found && r.value).toEqual({ late: 'gone-7f3c' });
    expect(r.stored).toBe(false);
    // Fenced before the fill: no fill was sent for the script to refuse.
    expect(await leaseCount(a, table, 'lost')).toBe(0);
    expect(await commands.carrying('gone-7f3c')).toEqual([]);
    expect(await raw.exists(valueKey(table, 'k'))).toBe(0);
    expect(t.stats().l1_entries).toBe(0);
  });

  it("a renewal that finds another instance holding the lease fences the load: no fill is sent, and the new holder's fill stands", async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const commands = await watchCommands(server.url);
    const table = uniqueTable('taken');
    const raw = scopedValkey(server.url);
    /** A store whose loader answers `{ from }` once `gate` opens; renewals every second. */
    const holder = async (from: string) => {
      const started = deferred<void>();
      const gate = deferred<void>();
      const load = async () => {
        started.resolve();
        await gate.promise;
        return { from };
      };
      const store = await openStore(
        { [table]: { leaseMs: 3_000, loadTimeoutMs: 10_000, load } },
        { valkey: { url: server.url } },
      );
      return { store, started: started.promise, open: () => gate.resolve() };
    };
    const a = await holder('a-taken-9d2e');
    const b = await holder('b');
    const fromA = a.store.table(table).get('k');
    await a.started;
    await vi.waitFor(async () => expect(await leaseCount(a.store, table, 'renewed')).toBe(1), {
      timeout: 5_000,
      interval: 20,
    });
    // Between two of A's renewals, A's lease expires (as when its renewals could not reach
    // Valkey) and B takes it: the lease key exists again, under B's token.
    expect(await raw.pexpire(leaseKey(table, 'k'), 1)).toBe(1);
    await vi.waitFor(async () => expect(await raw.exists(leaseKey(table, 'k'))).toBe(0), {
      interval: 5,
    });
    const fromB = b.store.table(table).get('k');
    await b.started;
    expect(await leaseCount(b.store, table, 'acquired')).toBe(1);
    expect(await leaseCount(a.store, table, 'expired')).toBe(0);
    // A's next renewal finds B's token.
    await vi.waitFor(
      async () =>
        expect(
          (await leaseCount(a.store, table, 'renewed')) +
            (await leaseCount(a.store, table, 'expired')),
        ).toBeGreaterThanOrEqual(2),
      { timeout: 5_000 },
    );
    expect(await leaseCount(a.store, table, 'expired')).toBe(1);
    expect(await leaseCount(a.store, table, 'renewed')).toBe(1);
    a.open();
    const r = await fromA;
    expect(r.found && r.value).toEqual({ from: 'a-taken-9d2e' });
    expect(r.stored).toBe(false);
    expect(await leaseCount(a.store, table, 'lost')).toBe(0);
    b.open();
    expect(await fromB).toMatchObject({ value: { from: 'b' }, layer: 'origin', stored: true });
    expect(await storedValue(raw, table, 'k')).toEqual({ from: 'b' });
    expect(await commands.carrying('a-taken-9d2e')).toEqual([]);
  });

  it('the holder answers its callers when its load returns, before its fill lands, with the version the fill stores', async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const raw = scopedValkey(server.url);
    onTestFinished(async () => {
      await raw.client('UNPAUSE');
    });
    const table = uniqueTable('answered');
    const a = await openStore(
      {
        [table]: {
          load: async () => {
            // Valkey runs no script from now on: the fill waits behind the pause.
            await raw.client('PAUSE', 10_000, 'WRITE');
            return { v: 'loaded-4b1e' };
          },
        },
      },
      { valkey: { url: server.url } },
    );
    const t = a.table(table);
    const answers = await Promise.all([t.get('k'), t.get('k')]);
    expect(await raw.exists(valueKey(table, 'k'))).toBe(0);
    expect(answers.map((r) => [r.found && r.value, r.layer, r.stored])).toEqual([
      [{ v: 'loaded-4b1e' }, 'origin', true],
      [{ v: 'loaded-4b1e' }, 'origin', true],
    ]);
    const version = answers[0]?.version;
    // Kept in L1 at once, at that version.
    expect(await t.get('k')).toMatchObject({ found: true, layer: 'l1', version });
    await raw.client('UNPAUSE');
    await vi.waitFor(async () =>
      expect(await readEnvelope(raw, table, 'k')).toMatchObject({
        value: { v: 'loaded-4b1e' },
        version,
      }),
    );
  });

  it('a fill refused after its holder answered is not kept: once refused, the next read gets the value that won', async () => {
    const server = await spawnServer();
    onTestFinished(() => server.stop());
    const raw = scopedValkey(server.url);
    onTestFinished(async () => {
      await raw.client('UNPAUSE');
    });
    const table = uniqueTable('answered-lost');
    const a = await openStore(
      {
        [table]: {
          load: async () => {
            // Another instance's PUT lands while this one loads (its event not seen here): it
            // replaced the value and cancelled the lease. Then the fill waits behind a pause.
            await plantEnvelope(raw, table, 'k', { value: { from: 'put-6c0d' } });
            await raw.del(leaseKey(table, 'k'));
            await raw.client('PAUSE', 10_000, 'WRITE');
            return { from: 'load-6c0d' };
          },
        },
      },
      { valkey: { url: server.url } },
    );
    const t = a.table(table);
    expect(await t.get('k')).toMatchObject({ value: { from: 'load-6c0d' }, layer: 'origin' });
    await raw.client('UNPAUSE');
    await vi.waitFor(async () => expect(await leaseCount(a, table, 'lost')).toBe(1));
    await vi.waitFor(() => expect(t.stats().l1_entries).toBe(0));
    const next = await t.get('k');
    expect(next.found && next.value).toEqual({ from: 'put-6c0d' });
  });
});

describe('change stream lease (one reader per stream)', () => {
  const streamLeases = (n: number) => {
    const key = `ecc:changes:{${uniqueTable('lease')}}:lease`;
    const raw = scopedValkey();
    return { key, raw, leases: Array.from({ length: n }, () => new StreamLease(raw, key, 2_000)) };
  };

  it('a key lost under a live holder (a Valkey restart) stays with that holder', async () => {
    const { key, raw, leases } = streamLeases(2);
    const [holder, other] = leases as [StreamLease, StreamLease];
    // Nobody holds it yet: an instance takes it at its second look.
    expect(await holder.hold()).toBe(false);
    expect(await holder.hold()).toBe(true);
    expect(await other.hold()).toBe(false);
    await raw.del(key);
    // The other instance looks first after the loss: it does not take the lease at its first look.
    expect(await other.hold()).toBe(false);
    expect(await holder.hold()).toBe(true);
    expect(await other.hold()).toBe(false);
    expect(await raw.get(key)).toBe(holder.token);
  });

  it('a lease whose holder died (its key expired) goes to another instance at its second look', async () => {
    const { key, raw, leases } = streamLeases(2);
    const [dead, other] = leases as [StreamLease, StreamLease];
    expect(await dead.hold()).toBe(false);
    expect(await dead.hold()).toBe(true);
    expect(await other.hold()).toBe(false);
    await raw.del(key);
    expect(await other.hold()).toBe(false);
    expect(await other.hold()).toBe(true);
    expect(await raw.get(key)).toBe(other.token);
    expect(await raw.pttl(key)).toBeGreaterThan(0);
  });

  it("a released lease goes to the next instance that looks, at once; a renewal never takes another holder's", async () => {
    const { key, raw, leases } = streamLeases(3);
    const [first, second, third] = leases as [StreamLease, StreamLease, StreamLease];
    expect(await first.hold()).toBe(false);
    expect(await first.hold()).toBe(true);
    expect(await second.hold()).toBe(false);
    await first.release();
    expect(await second.hold()).toBe(true);
    expect(await first.hold()).toBe(false);
    expect(await third.hold()).toBe(false);
    expect(await raw.get(key)).toBe(second.token);
  });
});
