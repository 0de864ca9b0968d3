import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { createStore, type Store } from '../src/index.js';
import { deferred, uniqueTable, valkeyTarget } from './helpers/store.js';

/** One sample of `name{labels}` from Prometheus text; undefined when absent. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const got = line.slice(name.length + 1, line.indexOf('}')).split(',');
    if (want.every((w) => got.includes(w)) && got.length === want.length)
      return Number(line.split(' ').pop());
  }
  return undefined;
}

describe('/metrics', () => {
  let store: Store;
  let app: FastifyInstance;
  const table = uniqueTable('metrics');
  const gate = deferred<void>();

  beforeAll(async () => {
    store = await createStore({
      valkey: valkeyTarget(),
      tables: {
        [table]: {
          load: async (id) => {
            await gate.promise;
            return { id };
          },
        },
      },
    });
    app = buildServer({ store, logger: pino({ level: 'silent' }) });
    await app.ready();
  });
  afterAll(async () => {
    await app.close();
    await store.close();
  });

  it('shows one fill, 199 coalesced and the layers after a herd of 200, and gauges at rest', async () => {
    const url = `/v1/tables/${table}/items/hot`;
    const herd = Array.from({ length: 200 }, () => app.inject(url));
    await vi.waitFor(() => expect(store.table(table).stats().coalesced).toBe(199));
    const during = (await app.inject('/metrics')).body;
    expect(sample(during, 'echostore_flights', { table })).toBe(1);
    gate.resolve();
    const answers = await Promise.all(herd);
    expect(answers.every((a) => a.statusCode === 200)).toBe(true);
    await app.inject(url); // one L1 hit

    const res = await app.inject('/metrics');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    const text = res.body;
    expect(sample(text, 'echostore_loads_total', { table })).toBe(1);
    // The old name stays, with the same count, until dashboards move (CHANGELOG.md).
    expect(sample(text, 'echostore_fills_total', { table })).toBe(1);
    expect(sample(text, 'echostore_coalesced_total', { table })).toBe(199);
    expect(sample(text, 'echostore_reads_total', { table, layer: 'origin' })).toBe(200);
    expect(sample(text, 'echostore_reads_total', { table, layer: 'l1' })).toBe(1);
    expect(sample(text, 'echostore_load_duration_seconds_count', { table })).toBe(1);
    expect(sample(text, 'echostore_flights', { table })).toBe(0);
    expect(sample(text, 'echostore_mailbox_depth', { table })).toBe(0);
    expect(sample(text, 'echostore_l1_entries', { table })).toBe(1);
  });
});
