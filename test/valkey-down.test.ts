import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { errorOf, openStore } from './helpers/probe.js';
import { spawnServer, type TestServer } from './helpers/server.js';
import { uniqueTable } from './helpers/store.js';

const COMMAND_TIMEOUT_MS = 500;

/** A server of this test's own, stopped when the test ends. */
async function ownServer(): Promise<TestServer> {
  const server = await spawnServer();
  onTestFinished(async () => {
    server.process?.kill('SIGCONT');
    await server.stop();
  });
  return server;
}

/** A store on `server` whose loader counts its calls. */
async function storeOn(server: TestServer) {
  const table = uniqueTable('down');
  const calls = { loads: 0 };
  const store = await openStore(
    {
      [table]: {
        load: (id) => {
          calls.loads++;
          return { id, n: calls.loads };
        },
      },
    },
    { valkey: { url: server.url, commandTimeoutMs: COMMAND_TIMEOUT_MS } },
  );
  return { store, t: store.table(table), calls };
}

describe('Valkey down', () => {
  it('with the server killed: L1 answers, misses go to the source, writes fail with ECC_VALKEY_UNAVAILABLE', {
    timeout: 15_000,
  }, async () => {
    const server = await ownServer();
    const { store, t, calls } = await storeOn(server);
    expect(await t.get('warm')).toMatchObject({ found: true, layer: 'origin' });
    expect(store.valkeyReady()).toBe(true);

    await server.stop();
    await vi.waitFor(() => expect(store.valkeyReady()).toBe(false), { timeout: 5_000 });

    expect(await t.get('warm')).toMatchObject({ found: true, layer: 'l1', value: { id: 'warm' } });
    expect(await t.get('cold')).toMatchObject({
      found: true,
      layer: 'origin',
      value: { id: 'cold' },
    });
    expect(calls.loads).toBe(2);

    const started = performance.now();
    const putError = await errorOf(t.put('cold', { written: true }));
    expect(putError.code).toBe('ECC_VALKEY_UNAVAILABLE');
    expect(performance.now() - started).toBeLessThan(COMMAND_TIMEOUT_MS + 2_000);
    expect((await errorOf(t.invalidate('warm'))).code).toBe('ECC_VALKEY_UNAVAILABLE');
    expect(store.valkeyReady()).toBe(false);
  });

  it('with the server paused: commands time out, misses still answer, writes fail with ECC_VALKEY_UNAVAILABLE', {
    timeout: 15_000,
  }, async () => {
    const server = await ownServer();
    const { t, calls } = await storeOn(server);
    expect(await t.get('warm')).toMatchObject({ found: true, layer: 'origin' });

    server.process?.kill('SIGSTOP');
    expect(await t.get('warm')).toMatchObject({ found: true, layer: 'l1' });
    expect(await t.get('cold')).toMatchObject({
      found: true,
      layer: 'origin',
      value: { id: 'cold' },
    });
    expect(calls.loads).toBe(2);

    const putError = await errorOf(t.put('cold', { written: true }));
    expect(putError.code).toBe('ECC_VALKEY_UNAVAILABLE');
    // The write may or may not have landed: L1 must not claim it did.
    expect(t.l1TtlMs('cold')).toBe(0);
  });
});
