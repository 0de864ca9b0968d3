import { describe, expect, it, onTestFinished } from 'vitest';
import { createStore } from '../src/index.js';
import { rawValkey } from './helpers/probe.js';
import { countingLoader, uniqueTable } from './helpers/store.js';

describe('a caller-owned client', () => {
  it('is left as found: 50 createStore/close cycles leave its listeners where they were, print no warning, and leave it connected', {
    timeout: 30_000,
  }, async () => {
    const client = rawValkey();
    onTestFinished(() => {
      client.disconnect();
    });
    await client.ping();
    const listeners = () =>
      Object.fromEntries(client.eventNames().map((e) => [String(e), client.listenerCount(e)]));
    const before = listeners();
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    onTestFinished(() => {
      process.off('warning', onWarning);
    });

    const table = uniqueTable('shared');
    const source = countingLoader();
    for (let i = 0; i < 50; i++) {
      const store = await createStore({
        valkey: client,
        tables: { [table]: { load: source.load } },
      });
      const r = await store.table(table).get(`id-${i % 5}`);
      expect(r.found).toBe(true);
      await store.close();
    }

    expect(listeners()).toEqual(before);
    expect(warnings.map((w) => w.name)).toEqual([]);
    expect(client.status).toBe('ready');
    expect(await client.ping()).toBe('PONG');
    // Counted at the source: 5 ids, each loaded once and then read from Valkey.
    expect(source.calls()).toBe(5);
  });
});
