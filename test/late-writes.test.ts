import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { startTcpProxy } from '../harness/tcp-proxy.js';
import { errorOf, openStore, readEnvelope, scopedValkey, storedValue } from './helpers/probe.js';
import { countingLoader, uniqueTable, valkeyCluster, valkeyUrl } from './helpers/store.js';

/**
 * Instance A reaches Valkey through a proxy that holds its bytes (buffered, not
 * dropped) and delivers them later; instance B connects directly.
 */
async function twoInstances(prefix: string) {
  const proxy = await startTcpProxy(Number(new URL(valkeyUrl()).port));
  onTestFinished(() => proxy.close());
  const table = uniqueTable(prefix);
  const source = countingLoader();
  const a = await openStore(
    { [table]: { load: source.load } },
    { valkey: { url: proxy.url, commandTimeoutMs: 500 } },
  );
  const b = await openStore({ [table]: { load: source.load } });
  // A has sent a script on its command connection (which the proxy can then find) and read Valkey's clock.
  await a.table(table).get('warm');
  return { proxy, table, a, b, raw: scopedValkey() };
}

/** Resolves once everything A's command connection sent before now has been run by Valkey (a command behind it answered). */
async function drained(store: Awaited<ReturnType<typeof openStore>>, table: string) {
  await store.table(table).get(`after-${Math.random()}`);
}

describe.skipIf(valkeyCluster() !== undefined)('a write reported as failed never lands', () => {
  it('a PUT answered 503 whose bytes reach Valkey after a later acknowledged PUT is refused there: the acknowledged value stays', async () => {
    const { proxy, table, a, b, raw } = await twoInstances('late-put');
    expect(proxy.hold('evalsha')).toBeGreaterThan(0);
    const failed = await errorOf(a.table(table).put('k', { n: 1 }));
    expect(failed.code).toBe('ECC_VALKEY_UNAVAILABLE');
    const acked = await b.table(table).put('k', { n: 2 });
    expect(proxy.deliver().bytes).toBeGreaterThan(0);
    await drained(a, table);

    expect(await storedValue(raw, table, 'k')).toEqual({ n: 2 });
    const envelope = await readEnvelope(raw, table, 'k');
    expect(envelope).toMatchObject({ version: acked.version });
    // A's timed-out command may have opened its breaker: degraded, a read asks the source until
    // the breaker's next probe (1 s) finds Valkey again; then A serves the fleet's value.
    await vi.waitFor(
      async () => expect(await a.table(table).get('k')).toMatchObject({ value: { n: 2 } }),
      { timeout: 5_000 },
    );
  });

  it('a DELETE answered 503 whose bytes reach Valkey after a later acknowledged PUT is refused there: the PUT stays', async () => {
    const { proxy, table, a, b, raw } = await twoInstances('late-del');
    await b.table(table).put('k', { n: 1 });
    expect(proxy.hold('evalsha')).toBeGreaterThan(0);
    const failed = await errorOf(a.table(table).invalidate('k'));
    expect(failed.code).toBe('ECC_VALKEY_UNAVAILABLE');
    await b.table(table).put('k', { n: 2 });
    expect(proxy.deliver().bytes).toBeGreaterThan(0);
    await drained(a, table);

    expect(await storedValue(raw, table, 'k')).toEqual({ n: 2 });
    await vi.waitFor(
      async () =>
        expect(await a.table(table).get('k')).toMatchObject({ found: true, value: { n: 2 } }),
      { timeout: 5_000 },
    );
  });

  it('a PUT answered 503 because its connection was cut while its bytes were held is refused when they arrive after a later acknowledged PUT', async () => {
    const { proxy, table, a, b, raw } = await twoInstances('cut-put');
    await b.table(table).put('k', { n: 0 });
    expect(proxy.hold('evalsha')).toBeGreaterThan(0);
    const put = errorOf(a.table(table).put('k', { n: 1 }));
    // Cut once the PUT's bytes are held in the proxy.
    await vi.waitFor(() => expect(proxy.heldBytes()).toBeGreaterThan(0));
    expect(proxy.cut()).toBe(1);
    const failed = await put;
    expect(failed.code).toBe('ECC_VALKEY_UNAVAILABLE');
    const acked = await b.table(table).put('k', { n: 2 });
    const delivered = proxy.deliver();
    expect(delivered.bytes).toBeGreaterThan(0);
    await delivered.ran;

    expect(await storedValue(raw, table, 'k')).toEqual({ n: 2 });
    expect(await readEnvelope(raw, table, 'k')).toMatchObject({ version: acked.version });
  });

  it('a DELETE answered 503 because its connection was cut while its bytes were held is refused when they arrive after a later acknowledged PUT', async () => {
    const { proxy, table, a, b, raw } = await twoInstances('cut-del');
    await b.table(table).put('k', { n: 1 });
    expect(proxy.hold('evalsha')).toBeGreaterThan(0);
    const del = errorOf(a.table(table).invalidate('k'));
    await vi.waitFor(() => expect(proxy.heldBytes()).toBeGreaterThan(0));
    expect(proxy.cut()).toBe(1);
    expect((await del).code).toBe('ECC_VALKEY_UNAVAILABLE');
    await b.table(table).put('k', { n: 2 });
    const delivered = proxy.deliver();
    expect(delivered.bytes).toBeGreaterThan(0);
    await delivered.ran;

    expect(await storedValue(raw, table, 'k')).toEqual({ n: 2 });
  });

  it('a PUT in flight when its store closes is failed with ECC_CLOSED only once it can no longer land, however long the command timeout', async () => {
    const proxy = await startTcpProxy(Number(new URL(valkeyUrl()).port));
    onTestFinished(() => proxy.close());
    const table = uniqueTable('late-close');
    const source = countingLoader();
    // A command timeout far beyond the close's grace: the write's deadline in Valkey is still 5 s.
    const a = await openStore(
      { [table]: { load: source.load } },
      { valkey: { url: proxy.url, commandTimeoutMs: 60_000 } },
    );
    const b = await openStore({ [table]: { load: source.load } });
    const raw = scopedValkey();
    await a.table(table).get('warm');
    await b.table(table).put('k', { n: 1 });
    expect(proxy.hold('evalsha')).toBeGreaterThan(0);
    const inFlight = errorOf(a.table(table).put('k', { n: 'reported failed' }));
    await new Promise((r) => setTimeout(r, 50)); // the PUT's bytes are in the proxy
    const closing = a.close(100);
    const failed = await inFlight;
    expect(failed.code).toBe('ECC_CLOSED');
    // After that report, another instance writes, and only then do the held bytes reach Valkey.
    const acked = await b.table(table).put('k', { n: 2 });
    expect(proxy.deliver().bytes).toBeGreaterThan(0);
    await closing;
    await raw.ping();
    await b.table(table).get(`after-${Math.random()}`);
    expect(await readEnvelope(raw, table, 'k')).toMatchObject({ version: acked.version });
    expect(await storedValue(raw, table, 'k')).toEqual({ n: 2 });
  }, 20_000);

  it('a PUT whose bytes arrive in time is applied and acknowledged as before', async () => {
    const { table, a, b, raw } = await twoInstances('in-time');
    const acked = await a.table(table).put('k', { n: 1 });
    expect(await readEnvelope(raw, table, 'k')).toMatchObject({ version: acked.version });
    expect(await b.table(table).get('k')).toMatchObject({ layer: 'l2', value: { n: 1 } });
  });
});
