import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { type Origin, startOrigin } from '../harness/origin.js';
import { type Service, startService } from '../harness/service.js';
import { withPolicy } from '../src/index.js';
import { errorOf, openStore } from './helpers/probe.js';
import { startServiceProcess } from './helpers/service.js';
import { uniqueTable, valkeyCluster, valkeyUrl } from './helpers/store.js';

/** One GET over HTTP: its status, error code and `Retry-After` (seconds). */
async function get(s: Service, table: string, id: string) {
  const res = await fetch(`${s.url}/v1/tables/${table}/items/${id}`);
  const body = (await res.json()) as { error?: { code: string } };
  const retryAfter = res.headers.get('retry-after');
  return {
    status: res.status,
    code: body.error?.code,
    retryAfterS: retryAfter === null ? undefined : Number(retryAfter),
  };
}

describe.skipIf(valkeyCluster() !== undefined)('an origin that says "wait" is heard', () => {
  let origin: Origin;
  const services: Service[] = [];
  const table = uniqueTable('wait');

  beforeAll(async () => {
    origin = await startOrigin(5);
    const config = {
      valkey: { url: valkeyUrl() },
      log: { level: 'warn' },
      tables: { [table]: { source: { kind: 'http', url: origin.template } } },
    };
    services.push(...(await Promise.all([startService(config), startService(config)])));
  });
  afterAll(async () => {
    await Promise.all(services.map((s) => s.stop()));
    await origin?.close();
  });

  it('a 503 with Retry-After: 30 is remembered fleet-wide: a client retrying every 100 ms for 3 s on two instances causes one origin read, and every answer is 502 ECC_LOAD_FAILED with Retry-After', async () => {
    origin.answerWith('busy', { status: 503, headers: { 'retry-after': '30' } });
    const answers = [];
    const endAt = performance.now() + 3_000;
    for (let i = 0; performance.now() < endAt; i++) {
      answers.push(await get(services[i % 2] as Service, table, 'busy'));
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(answers.length).toBeGreaterThan(20);
    for (const a of answers) {
      expect(a).toMatchObject({ status: 502, code: 'ECC_LOAD_FAILED' });
      expect(a.retryAfterS).toBeGreaterThanOrEqual(1);
      expect(a.retryAfterS).toBeLessThanOrEqual(30);
    }
    // Counted at the origin.
    expect(origin.readsOf('busy')).toBe(1);
  });

  it('an origin 429 or 503 with Retry-After: 0 is answered 502 ECC_LOAD_FAILED with Retry-After: 1', async () => {
    for (const status of [429, 503]) {
      const id = `now${status}`;
      origin.answerWith(id, { status, headers: { 'retry-after': '0' } });
      expect(await get(services[0] as Service, table, id)).toEqual({
        status: 502,
        code: 'ECC_LOAD_FAILED',
        retryAfterS: 1,
      });
    }
  });

  it('once the remembered failure ends the origin is asked again (a Retry-After of 1 s)', async () => {
    origin.answerWith('brief', { status: 503, headers: { 'retry-after': '1' } });
    expect(await get(services[0] as Service, table, 'brief')).toMatchObject({
      status: 502,
      retryAfterS: 1,
    });
    origin.answerWith('brief', undefined);
    expect(await get(services[1] as Service, table, 'brief')).toMatchObject({ status: 502 });
    expect(origin.readsOf('brief')).toBe(1);
    await new Promise((r) => setTimeout(r, 1_100)); // past the origin's Retry-After
    expect(await get(services[1] as Service, table, 'brief')).toMatchObject({ status: 200 });
    expect(origin.readsOf('brief')).toBe(2);
  });
});

describe.skipIf(valkeyCluster() !== undefined)('the log of a remembered failure', () => {
  it('names the table, the id and a cause at warn, like the first failure', async () => {
    const origin = await startOrigin(5);
    onTestFinished(() => origin.close());
    const table = uniqueTable('logged');
    const service = await startServiceProcess({
      valkey: { url: valkeyUrl() },
      tables: { [table]: { source: { kind: 'http', url: origin.template } } },
    });
    origin.answerWith('radatex', { status: 503, headers: { 'retry-after': '30' } });
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${service.url}/v1/tables/${table}/items/radatex`);
      expect(res.status).toBe(502);
    }
    expect(origin.readsOf('radatex')).toBe(1);
    await vi.waitFor(() => {
      const failures = service.logs().filter((l) => l.code === 'ECC_LOAD_FAILED');
      expect(failures).toHaveLength(2);
      for (const line of failures) {
        expect(line).toMatchObject({ level: 40, table, id: 'radatex' });
        expect(line.cause).toEqual(expect.any(String));
      }
      expect(failures[1]?.cause).toContain('remembered');
    });
  });
});

describe.skipIf(valkeyCluster() !== undefined)('a failing loader without Retry-After', () => {
  it('is remembered for errorTtlMs: 20 reads in 1 s of an id whose loader throws cost at most 3 loader calls', async () => {
    const table = uniqueTable('sqlish');
    let calls = 0;
    const store = await openStore({
      [table]: {
        load: async () => {
          calls++;
          throw new Error('relation "items" does not exist');
        },
        errorTtlMs: 500,
      },
    });
    const codes: string[] = [];
    for (let i = 0; i < 20; i++) {
      codes.push(
        await store
          .table(table)
          .get('x')
          .then(
            () => 'ok',
            (e: { code: string }) => e.code,
          ),
      );
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(new Set(codes)).toEqual(new Set(['ECC_LOAD_FAILED']));
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(calls).toBeLessThanOrEqual(3);
  });

  it.each([
    [
      'tags beyond the bounds',
      'ECC_BAD_ROW_TAGS',
      () => withPolicy({ x: 1 }, { tags: Array.from({ length: 65 }, (_, i) => `t${i}`) }),
    ],
    ['a value that is not JSON', 'ECC_BAD_VALUE', () => ({ n: 1n })],
  ])(
    'a row with %s is remembered like a failure: 20 reads within errorTtlMs cost one load, each answered %s',
    async (_, code, row) => {
      const table = uniqueTable('unstorable');
      let calls = 0;
      const store = await openStore({
        [table]: {
          load: async () => {
            calls++;
            return row();
          },
          errorTtlMs: 60_000,
        },
      });
      const codes = new Set<string>();
      for (let i = 0; i < 20; i++) codes.add((await errorOf(store.table(table).get('x'))).code);
      expect(codes).toEqual(new Set([code]));
      expect(calls).toBe(1);
    },
  );
});
