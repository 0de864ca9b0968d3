import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  decodeEnvelope,
  decodeHeader,
  type Envelope,
  encodeEnvelope,
  LUA_ENVELOPE,
  localize,
  readMark,
  toJson,
  writeArgs,
} from '../../src/l2/format.js';
import { LoadResult, withPolicy } from '../../src/store/load-result.js';
import { mintEnvelope, tombstone } from '../../src/store/mint.js';
import { VersionClock } from '../../src/store/version-clock.js';
import { rawValkey } from '../helpers/probe.js';

const sample: Envelope = {
  value: { id: 'a|b', n: [1, 2] },
  json: '{"id":"a|b","n":[1,2]}',
  version: 1_764_547_200_000_123,
  softExpiresAt: 1_764_547_260_000,
  hardExpiresAt: 1_764_547_320_000,
  deltaMs: 42,
  negative: false,
  born: 1_764_547_199_000_000,
  fingerprint: 'ab12cd34ef56ab78',
  tags: ['category:5', 'brand:acme'],
};

/** A row written without a fingerprint or tags, as a library table without them writes it. */
const plain: Envelope = { ...sample, fingerprint: '', tags: undefined };
delete plain.tags;

describe('envelope codec', () => {
  it('round-trips every field, a "|" inside the value included', () => {
    const text = encodeEnvelope(sample);
    expect(
      text.startsWith(
        'E3|1764547200000123|1764547260000|1764547320000|42|0|1764547199000000|ab12cd34ef56ab78|category:5 brand:acme|',
      ),
    ).toBe(true);
    expect(decodeEnvelope(text)).toEqual(sample);
  });

  it('round-trips a row without fingerprint or tags (empty fields)', () => {
    const text = encodeEnvelope(plain);
    expect(
      text.startsWith('E3|1764547200000123|1764547260000|1764547320000|42|0|1764547199000000|||'),
    ).toBe(true);
    expect(decodeEnvelope(text)).toEqual(plain);
  });

  it('round-trips a negative envelope and a tombstone', () => {
    const neg = { ...plain, value: null, json: 'null', negative: true };
    expect(decodeEnvelope(encodeEnvelope(neg))).toEqual(neg);
    expect(decodeEnvelope(encodeEnvelope(tombstone(7)))).toMatchObject(tombstone(7));
  });

  it.each([
    [
      'the JSON envelope of the older format',
      '{"v":1,"version":1,"softExpiresAt":1,"deltaMs":1,"value":1}',
    ],
    ['the E2 format of 0.1 (no born, fingerprint or tags)', 'E2|1|1|1|1|0|1'],
    ['another magic', 'E4|1|1|1|1|0|1|||1'],
    ['a missing field', 'E3|1|1|1|0|1|||1'],
    ['no tags field', 'E3|1|1|1|1|0|1|fp|1'],
    ['an empty field', 'E3|1||1|1|0|1|||1'],
    ['a non-digit', 'E3|1|1e3|1|1|0|1|||1'],
    ['a negative number', 'E3|-1|1|1|1|0|1|||1'],
    ['17 digits', 'E3|12345678901234567|1|1|1|0|1|||1'],
    [
      '17 digits of a small number (zero-padded), as Lua rejects them',
      'E3|00000000000000001|1|1|1|0|1|||1',
    ],
    ['a version beyond 2^53', 'E3|9007199254740993|1|1|1|0|1|||1'],
    ['JSON that does not parse', 'E3|1|1|1|1|0|1|||{oops'],
    ['nothing after the header', 'E3|1|1|1|1|0|1|||'],
  ])('%s is not an envelope (a miss)', (_why, text) => {
    expect(decodeEnvelope(text)).toBeUndefined();
  });

  it('reads the header without the JSON', () => {
    expect(decodeHeader('E3|5|6|7|8|1|9|fp|a b|{not json')).toEqual({
      version: 5,
      softExpiresAt: 6,
      hardExpiresAt: 7,
      deltaMs: 8,
      flags: 1,
      born: 9,
      fingerprint: 'fp',
      tags: 'a b',
      end: 22,
    });
  });

  it('a value flagged negative is "not found" whatever JSON follows the header', () => {
    expect(decodeEnvelope('E3|1|2|3|4|1|0|||{"x":1}')).toMatchObject({
      value: null,
      json: 'null',
      negative: true,
    });
  });

  it('a hard expiry before the soft one is read as the soft one', () => {
    expect(decodeEnvelope('E3|1|100|50|0|0|0|||1')?.hardExpiresAt).toBe(100);
  });

  it('marks what a flight read: absent, foreign, or its version', () => {
    expect(readMark(null)).toBe('');
    expect(readMark(undefined)).toBe('');
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
      encodeEnvelope(plain),
      'E2|1|1|1|1|0|1',
      'E3|1|1e3|1|1|0|1|||1',
      'E3|12345678901234567|1|1|1|0|1|||1',
      'E3|00000000000000001|1|1|1|0|1|||1',
      'E3|9007199254740993|1|1|1|0|1|||1',
      'E3|1||1|1|0|1|||1',
      'E3|1|1|1|1|0|1|fp|1',
      'E3|1|1|1|1|0|12345678901234567|||1',
    ];
    for (const text of texts) {
      const reply = (await lua(
        "local n, soft, hard, fp = header(ARGV[1]) if not n then return false end return {string.format('%.0f', n), string.format('%.0f', soft), string.format('%.0f', hard), fp}",
        text,
      )) as string[] | null;
      const h = decodeHeader(text);
      expect(
        reply === null ? undefined : [...reply.slice(0, 3).map(Number), reply[3]],
        text,
      ).toEqual(
        h === undefined ? undefined : [h.version, h.softExpiresAt, h.hardExpiresAt, h.fingerprint],
      );
    }
  });

  it('mark() equals readMark()', async () => {
    for (const text of [encodeEnvelope(sample), 'garbage', 'E3|x', 'E2|1|1|1|1|0|1']) {
      expect(await lua('return mark(ARGV[1])', text)).toBe(readMark(text));
    }
    expect(await lua('return mark(false)')).toBe(readMark(null));
  });

  it("stored() writes the header on Valkey's clock, its version above the key's and at least TIME in µs", async () => {
    const args = writeArgs(sample, sample.softExpiresAt - 60_000);
    expect(args).toEqual([
      60_000,
      120_000,
      42,
      0,
      '1764547199000000',
      'ab12cd34ef56ab78',
      'category:5 brand:acme',
      sample.json,
    ]);
    const run = (cur: string, born = args[4]) =>
      lua(
        "local nowms, nowus = clock() local env, v = stored(tonumber(ARGV[1]), nowus, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], nowms) return {env, string.format('%.0f', v), string.format('%.0f', nowms), string.format('%.0f', nowus)}",
        cur,
        ...args.slice(0, 4).map(String),
        born,
        args[5],
        args[6],
        args[7],
      ) as Promise<[string, string, string, string]>;
    const [text, version, nowms, nowus] = await run('1');
    const decoded = decodeEnvelope(text) as Envelope;
    expect(decoded.version).toBe(Number(version));
    expect(Number(version)).toBe(Number(nowus));
    expect(decoded.softExpiresAt).toBe(Number(nowms) + 60_000);
    expect(decoded.hardExpiresAt).toBe(Number(nowms) + 120_000);
    expect(decoded).toMatchObject({
      value: sample.value,
      json: sample.json,
      deltaMs: 42,
      negative: false,
      born: sample.born,
      fingerprint: sample.fingerprint,
      tags: sample.tags,
    });
    // born "now": Valkey's µs clock, as a PUT's.
    const [written, , , at] = await run('1', 'now');
    expect((decodeEnvelope(written) as Envelope).born).toBe(Number(at));
    // A key holding a version ahead of Valkey's clock: the write goes one above it.
    const ahead = String(Number(nowus) + 10_000_000_000);
    const [, above] = await run(ahead);
    expect(Number(above)).toBe(Number(ahead) + 1);
  });
});

describe('two clocks', () => {
  it("localize moves stored expiries onto this process's clock by what Valkey said remains", () => {
    const local = localize(sample, sample.softExpiresAt - 1_000, 50);
    expect(local.softExpiresAt).toBe(1_050);
    expect(local.hardExpiresAt).toBe(61_050);
    expect(local.version).toBe(sample.version);
  });

  it('writeArgs sends lifetimes, never instants, and never a negative one', () => {
    expect(writeArgs({ ...sample, softExpiresAt: 10, hardExpiresAt: 5 }, 100).slice(0, 2)).toEqual([
      0, 0,
    ]);
  });
});

describe('values a loader returns', () => {
  it('toJson gives the JSON text, or undefined for what cannot be stored', () => {
    expect(toJson({ a: [1, 'x'] })).toBe('{"a":[1,"x"]}');
    expect(toJson(null)).toBe('null');
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    for (const bad of [1n, cycle, undefined, () => 1]) expect(toJson(bad)).toBeUndefined();
  });

  it('withPolicy keeps the value and a copy of the policy', () => {
    const policy = { ttlMs: 1, staleMs: 0, negative: true };
    const r = withPolicy({ v: 1 }, policy);
    expect(r).toBeInstanceOf(LoadResult);
    expect(r.value).toEqual({ v: 1 });
    expect(r.policy).toEqual(policy);
    expect(r.policy).not.toBe(policy);
    expect(withPolicy(undefined, {}).policy).toEqual({});
  });

  it.each([
    [{ ttlMs: 0 }],
    [{ ttlMs: 1.5 }],
    [{ ttlMs: 2 ** 53 }],
    [{ staleMs: -1 }],
    [{ staleMs: 0.5 }],
    [{ staleMs: 2 ** 53 }],
  ])('withPolicy(%o) throws a TypeError', (policy) => {
    expect(() => withPolicy(1, policy)).toThrow(TypeError);
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

describe('version clock (the highest version seen from Valkey)', () => {
  it("keeps the highest version observed, within a minute of Valkey's latest known time", () => {
    const clock = new VersionClock();
    clock.observe(5); // no Valkey time seen yet: nothing is within reach
    expect(clock.last).toBe(0);
    clock.sawValkeyTime(1_000);
    clock.observe(900_000);
    clock.observe(800_000);
    expect(clock.last).toBe(900_000);
    clock.observe(61_000_000); // exactly a minute ahead
    expect(clock.last).toBe(61_000_000);
    clock.observe(61_000_001); // a planted version beyond it
    expect(clock.last).toBe(61_000_000);
    expect(clock.local()).toBe(61_000_001);
  });

  it("an older report of Valkey's time does not pull the reach back", () => {
    const clock = new VersionClock();
    clock.sawValkeyTime(2_000);
    clock.sawValkeyTime(1_000);
    clock.observe(62_000_000); // within a minute of 2,000 ms
    expect(clock.last).toBe(62_000_000);
  });
});
