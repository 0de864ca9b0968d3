/**
 * A managed-style cluster: 3 + 3 nodes TLS-only (`--port 0`, `--tls-cluster
 * yes`, `--tls-replication yes`, client certificates required), an admin
 * password on `default` and an ACL user with only the service's rights
 * (harness/secure.ts). The store reaches every node over TLS as that user,
 * checks that user's rights on every node at start, and refuses a setting it
 * cannot use, naming the field.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type ClusterNode, type LocalCluster, spawnCluster } from '../harness/cluster.js';
import { ask } from '../harness/valkey-server.js';
import type { ConfigError } from '../src/errors.js';
import type { ValkeyOptions } from '../src/valkey/client.js';
import { errorOf, openStore } from './helpers/probe.js';
import { countingLoader, uniqueTable } from './helpers/store.js';

let cluster: LocalCluster;
beforeAll(async () => {
  cluster = await spawnCluster({ secure: true });
}, 60_000);
afterAll(() => cluster?.stop());

/** The cluster's service section with `change` applied. */
const valkey = (change: Partial<ValkeyOptions> = {}): ValkeyOptions => ({
  ...cluster.valkey,
  connectTimeoutMs: 1_000,
  ...change,
});

/** `CLIENT LIST` of every node, as the admin. */
const clientLists = () =>
  Promise.all(cluster.nodes.map((n) => ask(n, (r) => r.client('LIST') as Promise<string>)));

describe('a TLS-only cluster with an ACL user', () => {
  it('serves reads, writes and invalidations through every primary over TLS, as the ACL user', async () => {
    const table = uniqueTable('tls-cluster');
    const source = countingLoader();
    const a = await openStore({ [table]: { load: source.load } }, { valkey: valkey() });
    const b = await openStore({ [table]: { load: source.load } }, { valkey: valkey() });
    expect(a.valkeyReady()).toBe(true);
    const ids = Array.from({ length: 30 }, (_, i) => `k${i}`);
    await a.table(table).getMany(ids);
    // Each id was loaded once for the fleet: b finds every one in L2.
    const fromB = await b.table(table).getMany(ids);
    expect(fromB.every((e) => e.ok && e.result.layer === 'l2')).toBe(true);
    expect(source.calls()).toBe(30);
    await b.table(table).put('k0', { v: 'new' });
    await expect
      .poll(async () => {
        const r = await a.table(table).get('k0');
        return r.found ? r.value : undefined;
      })
      .toEqual({ v: 'new' });
    // Every primary has connections of the service's user (30 ids spread over every shard).
    const lists = await clientLists();
    const primaries = await Promise.all(
      cluster.nodes.map((n) => ask(n, (r) => r.info('replication'))),
    );
    lists.forEach((list, i) => {
      if (/role:master/.test(primaries[i] as string)) expect(list).toMatch(/ user=echostore /);
    });
  });

  it('refuses to start without valkey.tls: no seed answers in plain text', async () => {
    const { tls: _, ...plain } = valkey();
    const err = await errorOf(openStore({ t: { load: async () => 1 } }, { valkey: plain }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe('valkey.cluster.nodes');
  });

  it('refuses to start without the client certificate the nodes require', async () => {
    const tls = { caFile: cluster.secure?.pki.ca as string };
    const err = await errorOf(
      openStore({ t: { load: async () => 1 } }, { valkey: valkey({ tls }) }),
    );
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe('valkey.cluster.nodes');
  });

  it('refuses a wrong password at start naming valkey.password, and never logs or echoes it', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => lines.push(line) });
    const wrong = 'wrong-4b7e-never-logged';
    const err = await errorOf(
      openStore({ t: { load: async () => 1 } }, { valkey: valkey({ password: wrong }), logger }),
    );
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe('valkey.password');
    expect(`${err.message} ${JSON.stringify(err)} ${lines.join('')}`).not.toContain(wrong);
  });

  it('checks the rights on every node: a replica whose user lacks +@scripting refuses the start, naming the right and that node', async () => {
    const replica = (
      await Promise.all(
        cluster.nodes.map(async (n) => ({ n, info: await ask(n, (r) => r.info('replication')) })),
      )
    ).find((x) => /role:slave/.test(x.info))?.n;
    if (replica === undefined) throw new Error('the cluster has no replica');
    // The check covers the nodes of the slot map: wait until the cluster lists this replica there.
    const { port } = replica;
    await vi.waitFor(
      async () => {
        const slots = JSON.stringify(
          await ask(cluster.nodes[0] as ClusterNode, (r) => r.call('CLUSTER', 'SLOTS')),
        );
        expect(slots).toContain(String(port));
      },
      { timeout: 10_000, interval: 100 },
    );
    await ask(replica, (r) => r.call('ACL', 'SETUSER', 'echostore', '-@scripting'));
    try {
      const err = await errorOf(openStore({ t: { load: async () => 1 } }, { valkey: valkey() }));
      expect(err.code).toBe('ECC_BAD_CONFIG');
      expect((err as ConfigError).field).toBe('valkey.username');
      expect(err.message).toContain('+@scripting');
      expect(err.message).toContain(replica.address);
      // The other nodes are not named: their user has the right.
      const others = cluster.nodes.filter((n) => n !== replica).map((n) => n.address);
      for (const address of others) expect(err.message).not.toContain(address);
    } finally {
      await ask(replica, (r) => r.call('ACL', 'SETUSER', 'echostore', '+@scripting'));
    }
  });
});
