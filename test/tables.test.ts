import type { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createStore, type TableOptions, valueKey } from '../src/index.js';
import { errorOf, openStore, rawValkey } from './helpers/probe.js';
import { deferred, uniqueTable, valkeyUrl } from './helpers/store.js';

describe('tables', () => {
  let raw: Redis;
  beforeAll(() => {
    raw = rawValkey();
  });
  afterAll(() => raw.quit());

  it('two tables with the same id never share a flight or a key', async () => {
    const a = uniqueTable('tbl-a');
    const b = uniqueTable('tbl-b');
    const gate = deferred<void>();
    const loads = { a: 0, b: 0 };
    const store = await openStore({
      [a]: {
        load: async (id) => {
          loads.a++;
          await gate.promise;
          return { table: 'a', id };
        },
      },
      [b]: {
        load: async (id) => {
          loads.b++;
          await gate.promise;
          return { table: 'b', id };
        },
      },
    });
    const readsA = Array.from({ length: 10 }, () => store.table(a).get('same'));
    const readsB = Array.from({ length: 10 }, () => store.table(b).get('same'));
    await vi.waitFor(() => expect(loads).toEqual({ a: 1, b: 1 }));
    gate.resolve();
    for (const r of await Promise.all(readsA)) expect(r).toMatchObject({ value: { table: 'a' } });
    for (const r of await Promise.all(readsB)) expect(r).toMatchObject({ value: { table: 'b' } });
    expect(loads).toEqual({ a: 1, b: 1 });
    expect(valueKey(a, 'same')).not.toBe(valueKey(b, 'same'));
    expect(await raw.exists(valueKey(a, 'same'), valueKey(b, 'same'))).toBe(2);
  });

  it('invalid ids are rejected with ECC_BAD_ID before Valkey or the loader is touched', async () => {
    const table = uniqueTable('bad-ids');
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: (id) => {
          loads++;
          return { id };
        },
      },
    });
    const t = store.table(table);
    // Everything that reaches Valkey about this table's ids (`ecc:<table>:{<id>}…`; not the
    // store's own probe key, which it may write at any time), seen by MONITOR on a separate connection.
    const seen: string[] = [];
    const monitor = await raw.monitor();
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args.some((a) => a.includes(`ecc:${table}:{`))) seen.push(args.join(' '));
    });
    try {
      const bad: unknown[] = [
        '',
        'a'.repeat(513),
        '€'.repeat(171),
        'a\u0000b',
        'a\u001fb',
        'a\u007fb',
        'a\u0085b',
        'a\uD800b',
        '\uD800',
        42,
        undefined,
        null,
        { id: 'x' },
      ];
      for (const id of bad) {
        for (const op of [
          () => t.get(id as string),
          () => t.put(id as string, { v: 1 }),
          () => t.invalidate(id as string),
        ]) {
          expect((await errorOf(op())).code).toBe('ECC_BAD_ID');
        }
      }
      expect(loads).toBe(0);
      expect(t.stats()).toMatchObject({ misses: 0, hits: 0, flights: 0, mailbox_depth: 0 });

      // Control: a valid id does reach Valkey, and MONITOR sees it after everything sent before it.
      await t.get('ok');
      await vi.waitFor(() => expect(seen.length).toBeGreaterThan(0));
      expect(
        seen.every((line) => line.includes(valueKey(table, 'ok'))),
        seen.join('\n'),
      ).toBe(true);
    } finally {
      monitor.disconnect();
    }
  });

  it('an id of exactly 512 bytes is accepted', async () => {
    const table = uniqueTable('max-id');
    const store = await openStore({ [table]: { load: (id) => ({ length: id.length }) } });
    const t = store.table(table);
    expect(await t.get('a'.repeat(512))).toMatchObject({ found: true, value: { length: 512 } });
    expect(await t.get(`${'€'.repeat(170)}ab`)).toMatchObject({
      found: true,
      value: { length: 172 },
    });
  });

  it("a table's idPattern is enforced", async () => {
    const table = uniqueTable('pattern');
    let loads = 0;
    const store = await openStore({
      [table]: {
        idPattern: '^[0-9]+$',
        load: (id) => {
          loads++;
          return { id };
        },
      },
    });
    const t = store.table(table);
    expect((await errorOf(t.get('abc'))).code).toBe('ECC_BAD_ID');
    expect((await errorOf(t.get('12a'))).code).toBe('ECC_BAD_ID');
    expect(loads).toBe(0);
    expect(await t.get('123')).toMatchObject({ found: true, value: { id: '123' } });
  });

  it('store.table() of an unknown table throws ECC_UNKNOWN_TABLE', async () => {
    const table = uniqueTable('known');
    const store = await openStore({ [table]: { load: () => 1 } });
    expect(() => store.table('nope')).toThrow(
      expect.objectContaining({ code: 'ECC_UNKNOWN_TABLE' }),
    );
    expect(store.table(table).name).toBe(table);
  });

  it('warns at start of a table whose leaseMs is not below its waitTimeoutMs, and not of one whose is', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(line) });
    const [slow, fine] = [uniqueTable('lease-long'), uniqueTable('lease-short')];
    await openStore(
      {
        [slow]: { load: () => 1, leaseMs: 10_000, waitTimeoutMs: 1_000 },
        [fine]: { load: () => 1, leaseMs: 1_000, waitTimeoutMs: 5_000 },
      },
      { logger },
    );
    const warned = lines.filter((l) => l.includes('leaseMs is not below waitTimeoutMs'));
    expect(warned).toHaveLength(1);
    expect(JSON.parse(warned[0] as string)).toMatchObject({
      table: slow,
      leaseMs: 10_000,
      waitTimeoutMs: 1_000,
    });
  });

  const load = () => 1;
  it.each<[string, Record<string, TableOptions>]>([
    ['a bad table name', { 'Bad Name': { load } }],
    ['a table name with a colon', { 'a:b': { load } }],
    ['a missing load function', { fine: {} as TableOptions }],
    ['ttlMs: -1', { fine: { load, ttlMs: -1 } }],
    ['an unknown policy field', { fine: { load, ttlMS: 5 } as TableOptions }],
    ['an idPattern that is not a regular expression', { fine: { load, idPattern: '(' } }],
  ])('createStore rejects %s with ECC_BAD_CONFIG', async (_, tables) => {
    const e = await errorOf(createStore({ valkey: valkeyUrl(), tables }));
    expect(e.code).toBe('ECC_BAD_CONFIG');
  });
});
