/**
 * Cluster mode on a real local cluster (3 primaries + 3 replicas, started
 * here): the slot rule, ids with braces, events across shards, and what a
 * dead primary costs (its shard only, until its replica is promoted).
 */
import type { Cluster } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { type LocalCluster, spawnCluster } from '../harness/cluster.js';
import { ask } from '../harness/valkey-server.js';
import type { ReadResult } from '../src/index.js';
import { TableEvents } from '../src/l2/events.js';
import { leaseKey, valueKey } from '../src/l2/keys.js';
import { createValkeyClient } from '../src/valkey/client.js';
import { keySlot, primaryOf } from '../src/valkey/slots.js';
import { errorOf, metricValue, openStore } from './helpers/probe.js';
import { countingLoader, deferred, uniqueTable } from './helpers/store.js';

/** `fn` passes within 15 s (these tests share two cores with servers that fail over). */
const eventually = <T>(fn: () => T | Promise<T>) =>
  vi.waitFor(fn, { timeout: 15_000, interval: 50 });

const silent = pino({ level: 'silent' });

/** A store on `cluster` (closed when the test ends). */
function clusterStore(cluster: LocalCluster, tables: Parameters<typeof openStore>[0]) {
  return openStore(tables, {
    valkey: { cluster: { nodes: cluster.seeds }, commandTimeoutMs: 500, connectTimeoutMs: 1_000 },
  });
}

/** The first id `<prefix>-<n>` of `table` whose keys live on (or off, with `not`) `primary`. */
function idOn(client: Cluster, table: string, prefix: string, primary: string, not = false) {
  for (let n = 0; n < 10_000; n++) {
    const id = `${prefix}-${n}`;
    if ((primaryOf(client, valueKey(table, id)) === primary) !== not) return id;
  }
  throw new Error(`no id of ${table} is ${not ? 'off' : 'on'} ${primary}`);
}

/** A cluster client of the tests' own, for the subscriber and the slot map. */
function clusterClient(cluster: LocalCluster): Cluster {
  const client = createValkeyClient({ cluster: { nodes: cluster.seeds } }) as Cluster;
  client.on('error', () => {});
  onTestFinished(() => client.disconnect());
  return client;
}

/** The value of a read (undefined for "not found"). */
async function answerOf(read: Promise<ReadResult>): Promise<unknown> {
  const r = await read;
  return r.found ? r.value : undefined;
}

/** How many `ASKING` commands (the first step of an ASK redirection) `node` has run. */
async function askings(node: Parameters<typeof ask>[0]): Promise<number> {
  const stats = (await ask(node, (r) => r.info('commandstats'))) as string;
  return Number(/^cmdstat_asking:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
}

async function ready(client: Cluster): Promise<void> {
  await eventually(() => expect(client.status).toBe('ready'));
}

describe('on a healthy cluster', () => {
  let cluster: LocalCluster;
  beforeAll(async () => {
    cluster = await spawnCluster();
  });
  afterAll(() => cluster?.stop());

  it('computes the slot of every key as CLUSTER KEYSLOT does', async () => {
    const client = clusterClient(cluster);
    await ready(client);
    const ids = ['}a', 'a{b}c', '{}', 'plain', '€uro', '{', '}', '{{}}', 'x}{y', '%7Da', '~'];
    const keys = [
      ...ids.flatMap((id) => [valueKey('t', id), leaseKey('t', id)]),
      ...['foo{bar}zap', '{}x', 'x{}{y}', 'no tag', '{user1000}.following', 'ü{ß}'],
    ];
    for (const key of keys) expect(keySlot(key), key).toBe(await client.cluster('KEYSLOT', key));
  });

  it('keeps the value and lease keys of ids with braces in one slot, under keys no other id has', () => {
    const ids = ['}a', 'a{b}c', '{}', '%7Da', '~{%7Da}', 'a%7Bb%7Dc', '%7B%7D', 'plain'];
    for (const id of ids) expect(keySlot(leaseKey('t', id)), id).toBe(keySlot(valueKey('t', id)));
    const keys = ids.flatMap((id) => [valueKey('t', id), leaseKey('t', id)]);
    expect(new Set(keys).size).toBe(keys.length);
    expect(valueKey('t', 'plain')).toBe('ecc:t:{plain}');
    expect(valueKey('t', '}a')).toBe('ecc:t:~{%7Da}');
    expect(valueKey('t', 'a{b}c')).toBe('ecc:t:~{a%7Bb%7Dc}');
    expect(valueKey('t', '{}')).toBe('ecc:t:~{%7B%7D}');
  });

  it('reads, writes and deletes the ids }a, a{b}c and {} across instances without a Valkey error', async () => {
    const table = uniqueTable('braces');
    const source = countingLoader(20);
    const a = await clusterStore(cluster, { [table]: { load: source.load } });
    const b = await clusterStore(cluster, { [table]: { load: source.load } });
    for (const id of ['}a', 'a{b}c', '{}']) {
      const herd = await Promise.all(
        [a, b].flatMap((s) => Array.from({ length: 20 }, () => s.table(table).get(id))),
      );
      expect(new Set(herd.map((r) => (r.found ? r.json : '-'))).size, id).toBe(1);
      await a.table(table).put(id, { put: id });
      await eventually(async () =>
        expect(await answerOf(b.table(table).get(id))).toEqual({ put: id }),
      );
      await b.table(table).invalidate(id);
      // Coherence is eventual: A drops its row when B's delete event arrives.
      await eventually(() => expect(a.table(table).l1TtlMs(id)).toBe(0));
      const again = await a.table(table).get(id);
      expect(again.layer, id).toBe('origin');
    }
    expect(source.calls()).toBe(6);
    for (const s of [a, b]) {
      expect(await metricValue(s, 'echostore_valkey_errors_total', table)).toBe(0);
      expect(await metricValue(s, 'echostore_bad_envelopes_total', table)).toBe(0);
    }
  });

  it('a fill on one shard wakes a waiter on another instance, whose subscriber is on another node', async () => {
    const table = uniqueTable('wake');
    const client = clusterClient(cluster);
    await ready(client);
    const events = new TableEvents(client, silent);
    onTestFinished(() => events.close());
    events.subscribe(table, { onEvent: () => {}, onReconnect: () => {} });
    await eventually(() =>
      expect(client.nodes('master').map(nodeAddress)).toContain(events.endpoint),
    );
    const id = idOn(client, table, 'elsewhere', events.endpoint, true);
    const watch = events.watch(table, id);
    onTestFinished(() => watch.close());
    const gate = deferred<void>();
    const holder = await clusterStore(cluster, {
      [table]: {
        load: async () => {
          await gate.promise;
          return { from: 'holder' };
        },
      },
    });
    const waiter = await clusterStore(cluster, { [table]: { load: () => ({ from: 'waiter' }) } });
    const holding = holder.table(table).get(id);
    await eventually(async () =>
      expect(
        await metricValue(holder, 'echostore_lease_total', table, { outcome: 'acquired' }),
      ).toBe(1),
    );
    const waiting = waiter.table(table).get(id);
    await eventually(async () =>
      expect(
        await metricValue(waiter, 'echostore_lease_total', table, { outcome: 'contended' }),
      ).toBe(1),
    );
    gate.resolve();
    // Woken by the fill's message (broadcast from the holder's shard), not by a timeout.
    expect((await watch.wait(10_000))?.k).toBe('fill');
    expect(await answerOf(waiting)).toEqual({ from: 'holder' });
    expect(await answerOf(holding)).toEqual({ from: 'holder' });
  });

  it('follows a slot moved to another primary under its feet (ASK, TRYAGAIN, then MOVED): no source read, no Valkey error', async () => {
    const table = uniqueTable('moved');
    const source = countingLoader(5);
    const a = await clusterStore(cluster, { [table]: { load: source.load } });
    const b = await clusterStore(cluster, { [table]: { load: source.load } });
    const id = 'moving';
    await a.table(table).get(id);
    const slot = keySlot(valueKey(table, id));
    const from = (await cluster.primaryOf(slot)) as NonNullable<
      Awaited<ReturnType<LocalCluster['primaryOf']>>
    >;
    const primaries = [];
    for (const n of cluster.nodes) {
      if (((await ask(n, (r) => r.call('ROLE'))) as string[])[0] === 'master') primaries.push(n);
    }
    const to = primaries.find((n) => n !== from) as typeof from;
    const ids = new Map(
      await Promise.all(
        [from, to].map(async (n) => [n, await ask(n, (r) => r.cluster('MYID'))] as const),
      ),
    );
    await ask(to, (r) => r.cluster('SETSLOT', slot, 'IMPORTING', ids.get(from) as string));
    await ask(from, (r) => r.cluster('SETSLOT', slot, 'MIGRATING', ids.get(to) as string));
    await ask(from, (r) =>
      r.migrate('127.0.0.1', to.port, '', 0, 5_000, 'KEYS', valueKey(table, id)),
    );
    // The value is on the new primary, the slot still half-moved: B's read is redirected (ASK)
    // and retried (TRYAGAIN: its two keys are split) until the move ends (MOVED).
    const asked = await askings(to);
    const reading = b.table(table).get(id);
    await eventually(async () => expect(await askings(to)).toBeGreaterThan(asked));
    for (const n of primaries) {
      await ask(n, (r) => r.cluster('SETSLOT', slot, 'NODE', ids.get(to) as string));
    }
    const read = await reading;
    expect(read.layer).toBe('l2');
    expect(source.calls()).toBe(1);
    await a.table(table).put(id, { moved: true });
    await eventually(async () =>
      expect(await answerOf(b.table(table).get(id))).toEqual({ moved: true }),
    );
    for (const s of [a, b]) {
      expect(await metricValue(s, 'echostore_valkey_errors_total', table)).toBe(0);
    }
  });

  it('refuses a seed list that no node answers, or that names a node not in cluster mode', async () => {
    const { spawnValkey } = await import('../harness/valkey-server.js');
    const single = await spawnValkey();
    onTestFinished(() => single.stop());
    const load = () => 1;
    const cases: Array<[string[], string]> = [
      [['127.0.0.1:1'], 'valkey.cluster.nodes'],
      [[`127.0.0.1:${single.port}`], 'valkey.cluster.nodes.0'],
      [[], 'valkey.cluster.nodes'],
    ];
    for (const [nodes, field] of cases) {
      const err = await errorOf(
        openStore({ t: { load } }, { valkey: { cluster: { nodes }, connectTimeoutMs: 500 } }),
      );
      expect(err.code, nodes.join()).toBe('ECC_BAD_CONFIG');
      expect((err as { field?: string }).field).toBe(field);
      expect(err.message.startsWith(`${field}: `)).toBe(true);
    }
    // One seed down, one up: a warning, and the store works through the other.
    const store = await clusterStore(
      { ...cluster, seeds: ['127.0.0.1:1', ...cluster.seeds.slice(0, 1)] },
      { t: { load } },
    );
    await eventually(() => expect(store.valkeyReady()).toBe(true));
  });

  it('a client seeded with one node is ready at its first attempt: its ready check never finds a node still connecting', async () => {
    // The ready check asks a random primary; the others are found by it, so they are new.
    for (let attempt = 0; attempt < 5; attempt++) {
      const client = createValkeyClient({ cluster: { nodes: cluster.seeds.slice(0, 1) } });
      client.on('error', () => {});
      onTestFinished(() => client.disconnect());
      let reconnects = 0;
      client.on('reconnecting', () => reconnects++);
      await ready(client as Cluster);
      expect(reconnects, `attempt ${attempt}`).toBe(0);
    }
  });
});

/** A primary (`host:port`) with no subscriber connection on it, once `subscribers` are connected somewhere. */
async function primaryWithoutSubscribers(
  cluster: LocalCluster,
  client: Cluster,
  subscribers: number,
) {
  const lists = async () =>
    Promise.all(
      cluster.nodes.map(async (n) => ({
        node: n,
        list: await ask(n, (r) => r.client('LIST')),
      })),
    );
  await eventually(async () => {
    const all = (await lists()).map((l) => l.list as string).join('\n');
    expect(all.match(/ sub=1 /g)?.length).toBe(subscribers);
  });
  const primaries = client.nodes('master').map(nodeAddress);
  const busy = new Set(
    (await lists())
      .filter((l) => (l.list as string).includes(' sub=1 '))
      .map((l) => l.node.address),
  );
  const free = primaries.find((p) => !busy.has(p));
  if (free === undefined) throw new Error('every primary has a subscriber');
  return free;
}

function nodeAddress(r: { options: { host?: string; port?: number } }): string {
  return `${r.options.host}:${r.options.port}`;
}

describe('when a primary dies', () => {
  it('the subscriber moves off a killed node, flushes L1 once, and still hears fills after the failover', async () => {
    const cluster = await spawnCluster();
    onTestFinished(() => cluster.stop());
    const table = uniqueTable('sub-failover');
    const client = clusterClient(cluster);
    await ready(client);
    let reconnects = 0;
    const events = new TableEvents(client, silent);
    onTestFinished(() => events.close());
    events.subscribe(table, { onEvent: () => {}, onReconnect: () => reconnects++ });
    await eventually(() =>
      expect(client.nodes('master').map(nodeAddress)).toContain(events.endpoint),
    );
    const killed = events.endpoint;
    await cluster.nodes.find((n) => n.address === killed)?.kill();
    await eventually(() => expect(reconnects).toBe(1));
    expect(events.endpoint).not.toBe(killed);
    await cluster.waitHealthy();
    const store = await clusterStore(cluster, { [table]: { load: (id) => ({ id }) } });
    await eventually(() => expect(store.valkeyReady()).toBe(true));
    // A fill on every shard, the promoted replica's included, reaches the moved subscriber.
    const owners = new Set<string>();
    for (let n = 0; owners.size < 3; n++) {
      const id = `after-${n}`;
      const owner = primaryOf(client, valueKey(table, id));
      if (owner === undefined || owners.has(owner)) continue;
      owners.add(owner);
      const watch = events.watch(table, id);
      await store.table(table).get(id);
      expect((await watch.wait(10_000))?.k, `${id} on ${owner}`).toBe('fill');
      watch.close();
    }
    expect(reconnects).toBe(1);
  }, 60_000);

  it('degrades its own shard only, and fills resume on it once its replica is promoted', async () => {
    const cluster = await spawnCluster();
    onTestFinished(() => cluster.stop());
    const table = uniqueTable('shard-down');
    const source = countingLoader(5);
    const policy = {
      load: source.load,
      leaseMs: 2_000,
      loadTimeoutMs: 1_000,
      waitTimeoutMs: 3_000,
    };
    const a = await clusterStore(cluster, { [table]: policy });
    const b = await clusterStore(cluster, { [table]: policy });
    const client = a.valkey as Cluster;
    // A primary neither store's subscriber is on: killing that one would flush their L1s (coherence).
    const victim = await primaryWithoutSubscribers(cluster, client, 2);
    // Ids chosen on the slot map before the kill: the server stops listing a failed primary's slots.
    const names = ['hot', 'put', 'after', ...Array.from({ length: 6 }, (_, i) => `cold${i}`)];
    const ids = (side: string, not: boolean) =>
      new Map(names.map((n) => [n, idOn(client, table, `${side}-${n}`, victim, not)]));
    const [lostIds, keptIds] = [ids('lost', false), ids('kept', true)];
    const lost = (n: string) => lostIds.get(n) as string;
    const kept = (n: string) => keptIds.get(n) as string;
    const hot = lost('hot');
    await a.table(table).get(hot);
    await cluster.nodes.find((n) => n.address === victim)?.kill();

    // Until the breaker of the dead primary opens, its commands cost commandTimeoutMs (500 ms).
    const started = performance.now();
    const lostReads = await Promise.all(
      Array.from({ length: 6 }, (_, i) => a.table(table).get(lost(`cold${i}`))),
    );
    expect(lostReads.every((r) => r.layer === 'origin')).toBe(true);
    expect(performance.now() - started).toBeLessThan(2_000);
    expect((a.valkey as Cluster).status).toBe('ready');
    expect(a.valkeyReady()).toBe(false);
    expect((await a.table(table).get(hot)).layer).toBe('l1');
    expect((await errorOf(a.table(table).put(lost('put'), 1))).code).toBe('ECC_VALKEY_UNAVAILABLE');

    // The other shards: fills, L2 hits on the other instance, writes; none waits out a
    // command timeout (500 ms) on the dead primary.
    for (let i = 0; i < 6; i++) {
      const id = kept(`cold${i}`);
      const t0 = performance.now();
      expect((await a.table(table).get(id)).stored).toBe(true);
      expect((await b.table(table).get(id)).layer).toBe('l2');
      expect(performance.now() - t0).toBeLessThan(500);
    }
    await a.table(table).put(kept('put'), { put: 1 });
    expect(await answerOf(b.table(table).get(kept('put')))).toEqual({ put: 1 });

    // The replica is promoted: the shard fills again, and the store is whole.
    await cluster.waitHealthy();
    await eventually(() => expect(a.valkeyReady()).toBe(true));
    const id = lost('after');
    expect((await a.table(table).get(id)).stored).toBe(true);
    const reads = source.calls();
    expect((await b.table(table).get(id)).layer).toBe('l2');
    expect(source.calls()).toBe(reads);
  }, 60_000);
});
