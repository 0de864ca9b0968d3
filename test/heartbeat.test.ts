import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { startTcpProxy } from '../harness/tcp-proxy.js';
import { metricValue, openStore } from './helpers/probe.js';
import { countingLoader, uniqueTable, valkeyUrl } from './helpers/store.js';

describe('the subscriber cannot die silently', () => {
  it('a subscriber connection that stops delivering is found by its heartbeat within 5 s and replaced; L1 is flushed then, so a write made meanwhile on another instance is seen', async () => {
    const proxy = await startTcpProxy(Number(new URL(valkeyUrl()).port));
    onTestFinished(() => proxy.close());
    const table = uniqueTable('frozen-sub');
    const source = countingLoader();
    // A reaches Valkey through the proxy; B directly.
    const a = await openStore({ [table]: { load: source.load } }, { valkey: proxy.url });
    const b = await openStore({ [table]: { load: source.load } });
    expect(await a.table(table).get('k')).toMatchObject({ layer: 'origin', value: { n: 1 } });
    expect(await a.table(table).get('k')).toMatchObject({ layer: 'l1' });

    // Only A's subscriber connection freezes: its main connection still answers.
    expect(proxy.freeze('subscribe')).toBe(1);
    const frozenAt = performance.now();
    await b.table(table).put('k', { put: 'by b' });
    // The event is lost on the frozen connection: A still answers its old row from L1.
    expect(await a.table(table).get('k')).toMatchObject({ layer: 'l1', value: { n: 1 } });

    await vi.waitFor(
      async () => expect(await metricValue(a, 'echostore_l1_flushes_total', table)).toBe(1),
      { timeout: 6_000, interval: 50 },
    );
    const replacedMs = performance.now() - frozenAt;
    expect(replacedMs).toBeLessThan(5_000);
    expect(await a.table(table).get('k')).toMatchObject({ layer: 'l2', value: { put: 'by b' } });
    expect(a.valkeyHealth().subscriber).toBe('ready');
    // Counted at the source: the one first load, nothing more.
    expect(source.calls()).toBe(1);

    // The new subscriber delivers: B's next write drops A's row at once.
    await b.table(table).put('k', { put: 'again' });
    await vi.waitFor(() => expect(a.table(table).stats().l1_entries).toBe(0));
  });
});
