import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createVersionClock,
  decodeEnvelope,
  decodeHeader,
  type Envelope,
  encodeEnvelope,
  LUA_ENVELOPE,
  mintEnvelope,
  readMark,
  tombstone,
} from '../../src/store/envelope.js';
import { rawValkey } from '../helpers/probe.js';

const sample: Envelope = {
  value: { id: 'a|b', n: [1, 2] },
  json: '{"id":"a|b","n":[1,2]}',
  version: 1_764_547_200_000_123,
  softExpiresAt: 1_764_547_260_000,
  hardExpiresAt: 1_764_547_320_000,
  deltaMs: 42,
  negative: false,
};

describe('envelope codec', () => {
  it('round-trips every field, a "|" inside the value included', () => {
    const text = encodeEnvelope(sample);
    expect(text.startsWith('E2|1764547200000123|1764547260000|1764547320000|42|0|')).toBe(true);
    expect(decodeEnvelope(text)).toEqual(sample);
  });

  it('round-trips a negative envelope and a tombstone', () => {
    const neg = { ...sample, value: null, json: 'null', negative: true };
    expect(decodeEnvelope(encodeEnvelope(neg))).toEqual(neg);
    expect(decodeEnvelope(encodeEnvelope(tombstone(7)))).toEqual(tombstone(7));
  });

  it.each([
    [
      'the JSON envelope of the older format',
      '{"v":1,"version":1,"softExpiresAt":1,"deltaMs":1,"value":1}',
    ],
    ['another magic', 'E3|1|1|1|1|0|1'],
    ['a missing field', 'E2|1|1|1|0|1'],
    ['an empty field', 'E2|1||1|1|0|1'],
    ['a non-digit', 'E2|1|1e3|1|1|0|1'],
    ['a negative number', 'E2|-1|1|1|1|0|1'],
    ['17 digits', 'E2|12345678901234567|1|1|1|0|1'],
    ['a version beyond 2^53', 'E2|9007199254740993|1|1|1|0|1'],
    ['JSON that does not parse', 'E2|1|1|1|1|0|{oops'],
    ['nothing after the header', 'E2|1|1|1|1|0|'],
  ])('%s is not an envelope (a miss)', (_why, text) => {
    expect(decodeEnvelope(text)).toBeUndefined();
  });

  it('reads the header without the JSON', () => {
    expect(decodeHeader('E2|5|6|7|8|1|{not json')).toEqual({
      version: 5,
      softExpiresAt: 6,
      hardExpiresAt: 7,
      deltaMs: 8,
      flags: 1,
      end: 13,
    });
  });

  it('a hard expiry before the soft one is read as the soft one', () => {
    expect(decodeEnvelope('E2|1|100|50|0|0|1')?.hardExpiresAt).toBe(100);
  });

  it('marks what a flight read: absent, foreign, or its version', () => {
    expect(readMark(null)).toBe('');
    expect(readMark('garbage')).toBe('*');
    expect(readMark(encodeEnvelope(sample))).toBe('1764547200000123');
  });
});

describe('envelope format in Lua (the same rules on a real server)', () => {
  let raw: Redis;
  beforeAll(() => {
    raw = rawValkey();
  });
  afterAll(() => raw.quit());

  const lua = (body: string, ...args: string[]) =>
    raw.eval(`${LUA_ENVELOPE}\n${body}`, 0, ...args) as Promise<unknown>;

  it('header() reads what encodeEnvelope wrote, and rejects what decodeHeader rejects', async () => {
    const texts = [
      encodeEnvelope(sample),
      encodeEnvelope(tombstone(3)),
      '{"v":1,"version":1,"softExpiresAt":1,"deltaMs":1,"value":1}',
      'E2|1|1e3|1|1|0|1',
      'E2|12345678901234567|1|1|1|0|1',
      'E2|9007199254740993|1|1|1|0|1',
      'E2|1||1|1|0|1',
    ];
    for (const text of texts) {
      const reply = (await lua(
        "local n, soft, hard = header(ARGV[1]) if not n then return false end return {string.format('%.0f', n), string.format('%.0f', soft), string.format('%.0f', hard)}",
        text,
      )) as string[] | null;
      const h = decodeHeader(text);
      expect(reply === null ? undefined : reply.map(Number), text).toEqual(
        h === undefined ? undefined : [h.version, h.softExpiresAt, h.hardExpiresAt],
      );
    }
  });

  it('mark() equals readMark()', async () => {
    for (const text of [encodeEnvelope(sample), 'garbage', 'E2|x']) {
      expect(await lua('return mark(ARGV[1])', text)).toBe(readMark(text));
    }
    expect(await lua('return mark(false)')).toBe(readMark(null));
  });

  it('stamp() raises the version above the current one and keeps the rest byte for byte', async () => {
    const text = encodeEnvelope({ ...sample, version: 10 });
    const raised = (await lua(
      'local env, v = stamp(ARGV[1], tonumber(ARGV[2])) return env',
      text,
      '1764547200000999',
    )) as string;
    expect(decodeEnvelope(raised)).toEqual({ ...sample, version: 1764547200001000 });
    const kept = await lua('local env, v = stamp(ARGV[1], 5) return env', text);
    expect(kept).toBe(text);
  });
});

describe('minting', () => {
  const row = { value: 1, json: '1', version: 1, deltaMs: 0, negative: false };

  it('soft = now + ttl·f and hard = soft + stale·f with one factor f in [1, 1 + jitter]', () => {
    const life = { ttlMs: 1_000, staleMs: 500, jitter: 0.2 };
    expect(mintEnvelope(row, life, 10_000, () => 0)).toMatchObject({
      softExpiresAt: 11_000,
      hardExpiresAt: 11_500,
    });
    expect(mintEnvelope(row, life, 10_000, () => 0.5)).toMatchObject({
      softExpiresAt: 11_100,
      hardExpiresAt: 11_650,
    });
  });

  it('a soft TTL is at least 1 ms', () => {
    const e = mintEnvelope(row, { ttlMs: 0, staleMs: 0, jitter: 0 }, 5, () => 0);
    expect(e.softExpiresAt).toBe(6);
  });
});

describe('version clock (hybrid logical clock)', () => {
  it('mints epoch ms × 1000, strictly increasing even when time stands still', () => {
    const clock = createVersionClock(() => 1_000);
    expect(clock.mint()).toBe(1_000_000);
    expect(clock.mint()).toBe(1_000_001);
  });

  it('mints above what it observed, but ignores observations more than a minute ahead', () => {
    let now = 1_000;
    const clock = createVersionClock(() => now);
    clock.observe(30_000_000); // 29 s ahead
    expect(clock.mint()).toBe(30_000_001);
    clock.observe(500_000_000); // 499 s ahead: a planted version
    expect(clock.mint()).toBe(30_000_002);
    now = 40_000;
    expect(clock.mint()).toBe(40_000_000);
  });
});
