import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Origin, startOrigin } from '../harness/origin.js';
import { type Service, SKEW_CLOCK, startService } from '../harness/service.js';
import { rawValkey, readEnvelope, untilValkeyTime } from './helpers/probe.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

const TTL_MS = 1_000;
const JITTER = 0.2;

/** A GET as an instance answered it: the origin's read number and what Cache-Status said. */
async function read(s: Service, table: string, id: string) {
  const res = await fetch(`${s.url}/v1/tables/${table}/items/${id}`);
  const body = (await res.json()) as { read: number };
  const status = res.headers.get('cache-status') ?? '';
  return {
    read: body.read,
    hit: /; hit;/.test(status),
    ttlS: Number(/ttl=(-?\d+)/.exec(status)?.[1]),
  };
}

describe('one clock for the fleet (hosts whose clocks are ten minutes off)', () => {
  let origin: Origin;
  const services: Service[] = [];
  let right: Service;
  let ahead: Service;
  let behind: Service;
  let raw: Redis;
  const table = uniqueTable('skew');

  beforeAll(async () => {
    raw = rawValkey(valkeyUrl());
    origin = await startOrigin(5);
    const config = {
      valkey: { url: valkeyUrl() },
      log: { level: 'warn' },
      tables: {
        [table]: {
          source: { kind: 'http', url: origin.template },
          ttlMs: TTL_MS,
          jitter: JITTER,
          staleMs: 0,
          earlyRefreshBeta: 0,
        },
      },
    };
    const skewed = (ms: number) => ({
      nodeArgs: ['--import', SKEW_CLOCK],
      env: { SKEW_MS: String(ms) },
    });
    [right, ahead, behind] = await Promise.all([
      startService(config),
      startService(config, skewed(10 * 60_000)),
      startService(config, skewed(-10 * 60_000)),
    ]);
    services.push(right, ahead, behind);
  });
  afterAll(async () => {
    raw?.disconnect();
    await Promise.all(services.map((s) => s.stop()));
    await origin?.close();
  });

  it('neither reloads a value another host filled, nor serves it fresh longer than ttlMs × (1 + jitter)', async () => {
    const maxTtlS = Math.trunc((TTL_MS * (1 + JITTER)) / 1000);
    const filler = [right, ahead, behind];
    for (const [i, s] of filler.entries()) {
      const id = `k${i}`;
      const first = await read(s, table, id);
      expect(first).toMatchObject({ read: 1, hit: false });
      for (const other of filler) {
        const r = await read(other, table, id);
        expect(r.read, `${id} on another host`).toBe(1);
        expect(r.ttlS).toBeGreaterThanOrEqual(0);
        expect(r.ttlS).toBeLessThanOrEqual(maxTtlS);
      }
    }
    // One source read per key, counted by the source: no host judged another's value expired.
    expect(origin.totalReads()).toBe(3);
  });

  it('no host serves a value past its TTL as fresh: after it, every host answers the next generation', async () => {
    // Every host takes an L1 row of one generation of g0 (the test's own id: a value of the
    // test before may have expired already on a busy machine).
    for (const s of [right, ahead, behind]) await read(s, table, 'g0');
    const generation = origin.readsOf('g0');
    // Until Valkey's clock, the fleet's one clock, is past that generation's expiry (no stale
    // window: soft is hard, and PX ends there). No envelope: it has expired already.
    const envelope = await readEnvelope(raw, table, 'g0');
    if (envelope === 'garbage') throw new Error('g0 is not an envelope');
    if (envelope !== null) await untilValkeyTime(raw, envelope.hardExpiresAt + 100, TTL_MS * 3);
    for (const s of [behind, ahead, right]) {
      const r = await read(s, table, 'g0');
      expect(r.read, 'a fresh answer of the expired generation').toBeGreaterThan(generation);
      expect(r.ttlS).toBeLessThanOrEqual(1);
    }
    expect(origin.readsOf('g0')).toBeGreaterThan(generation);
  });
});
