import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { startTcpProxy } from '../harness/tcp-proxy.js';
import { openStore } from './helpers/probe.js';
import { uniqueTable, valkeyCluster, valkeyUrl } from './helpers/store.js';

describe.skipIf(valkeyCluster() !== undefined)('a row loaded while Valkey was unreachable', () => {
  it('is re-validated once Valkey answers again: the instance serves the fleet value within a read or two of recovery, not until its L1 TTL', async () => {
    const proxy = await startTcpProxy(Number(new URL(valkeyUrl()).port));
    onTestFinished(() => proxy.close());
    const table = uniqueTable('degraded-row');
    let sourceReads = 0;
    const load = async (id: string) => {
      sourceReads++;
      return { id, from: 'source' };
    };
    // A long TTL: today the degraded row lives in L1 until it (30 s).
    const policy = { ttlMs: 300_000, load };
    const a = await openStore(
      { [table]: policy },
      { valkey: { url: proxy.url, commandTimeoutMs: 300 } },
    );
    const b = await openStore({ [table]: policy });
    // A holds k; B's PUT reaches A as a coherence event, which drops A's row: A has seen it.
    await a.table(table).get('k');
    await b.table(table).put('k', { from: 'put by b' });
    await vi.waitFor(() => expect(a.table(table).stats().l1_entries).toBe(0));

    // A's command link stalls (its bytes held): A's miss times out and is served from the source.
    expect(proxy.hold('evalsha')).toBeGreaterThan(0);
    const degraded = await a.table(table).get('k');
    expect(degraded).toMatchObject({ layer: 'origin', value: { from: 'source' } });
    const readsWhileDegraded = sourceReads;

    // The link recovers.
    proxy.deliver();
    const recoveredAt = performance.now();
    const valueOnA = async () => {
      const r = await a.table(table).get('k');
      return r.found ? r.value : undefined;
    };
    await vi.waitFor(async () => expect(await valueOnA()).toEqual({ from: 'put by b' }), {
      timeout: 3_000,
      interval: 50,
    });
    expect(performance.now() - recoveredAt).toBeLessThan(2_000);
    // Re-validated from Valkey, not by asking the source again (counted at the source).
    expect(sourceReads - readsWhileDegraded).toBeLessThanOrEqual(1);
    expect(await valueOnA()).toEqual({ from: 'put by b' });
    expect((await a.table(table).get('k')).layer).toBe('l1');
  });
});
