import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type Origin, startOrigin } from '../harness/origin.js';
import { type Service, startService } from '../harness/service.js';
import { openStore } from './helpers/probe.js';
import { uniqueTable, valkeyCluster, valkeyUrl } from './helpers/store.js';

const TTL_MS = 500;
const IDS = Array.from({ length: 20 }, (_, i) => `row${i}`);

async function status(s: Service, table: string, id: string): Promise<number> {
  const res = await fetch(`${s.url}/v1/tables/${table}/items/${id}`);
  await res.arrayBuffer();
  return res.status;
}

describe.skipIf(valkeyCluster() !== undefined)(
  'a transient 404 does not replace good values',
  () => {
    let origin: Origin;
    let service: Service;
    const blip = uniqueTable('blip');
    const gone = uniqueTable('gone');

    beforeAll(async () => {
      origin = await startOrigin(2);
      const policy = { ttlMs: TTL_MS, staleMs: 60_000, jitter: 0, earlyRefreshBeta: 0 };
      service = await startService({
        valkey: { url: valkeyUrl() },
        log: { level: 'warn' },
        tables: {
          // The http kind's default: a 404 for a row with a value is confirmed for 5 s.
          [blip]: { source: { kind: 'http', url: origin.template }, ...policy },
          [gone]: {
            source: { kind: 'http', url: origin.template },
            ...policy,
            confirmNotFoundMs: 1_000,
          },
        },
      });
    });
    afterAll(async () => {
      await service?.stop();
      await origin?.close();
    });

    it('a 1.5 s blip of 404s from an http origin turns none of 20 stale rows into 404s, during it or after', async () => {
      for (const id of IDS) expect(await status(service, blip, id)).toBe(200);
      // Past ttlMs: every row is stale, so each read asks for a refresh.
      await new Promise((r) => setTimeout(r, TTL_MS + 100));
      for (const id of IDS) origin.answerWith(id, { status: 404 });
      const answers: number[] = [];
      const blipEnd = performance.now() + 1_500;
      while (performance.now() < blipEnd) {
        answers.push(...(await Promise.all(IDS.map((id) => status(service, blip, id)))));
        await new Promise((r) => setTimeout(r, 100));
      }
      // The origin did answer 404 (counted there): the refreshes asked it.
      const readsDuringBlip = IDS.reduce((n, id) => n + origin.readsOf(id), 0);
      expect(readsDuringBlip).toBeGreaterThan(IDS.length);
      for (const id of IDS) origin.answerWith(id, undefined);
      const recoveredEnd = performance.now() + 1_000;
      while (performance.now() < recoveredEnd) {
        answers.push(...(await Promise.all(IDS.map((id) => status(service, blip, id)))));
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(answers.filter((s) => s === 404)).toHaveLength(0);
      expect(new Set(answers)).toEqual(new Set([200]));
    });

    it('a real deletion disappears once its 404 held for confirmNotFoundMs (1 s), within the stated bound', async () => {
      expect(await status(service, gone, 'deleted')).toBe(200);
      // Past ttlMs: the row is stale.
      await new Promise((r) => setTimeout(r, TTL_MS + 100));
      origin.answerWith('deleted', { status: 404 });
      const since = performance.now();
      expect(await status(service, gone, 'deleted')).toBe(200);
      await vi.waitFor(async () => expect(await status(service, gone, 'deleted')).toBe(404), {
        // confirmNotFoundMs + the refresh back-off after the first 404 (1 s) + slack.
        timeout: 3_000,
        interval: 50,
      });
      expect(performance.now() - since).toBeGreaterThanOrEqual(1_000);
    });
  },
);

describe.skipIf(valkeyCluster() !== undefined)('an authoritative source', () => {
  it('with confirmNotFoundMs 0 (a SQL kind, a load function) one "not found" replaces the value', async () => {
    const table = uniqueTable('authoritative');
    let calls = 0;
    let deleted = false;
    const store = await openStore({
      [table]: {
        ttlMs: 100,
        staleMs: 60_000,
        jitter: 0,
        earlyRefreshBeta: 0,
        load: () => {
          calls++;
          return deleted ? undefined : { calls };
        },
      },
    });
    expect((await store.table(table).get('x')).found).toBe(true);
    deleted = true;
    await vi.waitFor(async () => expect((await store.table(table).get('x')).found).toBe(false), {
      interval: 20,
    });
    expect(calls).toBe(2);
  });
});
