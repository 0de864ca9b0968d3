/** The answers of L1 hits (`answers.ts`): the row's fields, a value decoded for each caller. */
import { describe, expect, it } from 'vitest';
import type { Envelope } from '../../src/l2/format.js';
import { entityTagOf, rowAnswer, sharedAnswer } from '../../src/store/answers.js';
import { entityTag } from '../../src/store/etag.js';
import { L1Row } from '../../src/store/l1.js';
import type { FoundResult } from '../../src/store/types.js';

const row = (negative = false) => {
  const envelope: Envelope = {
    value: undefined,
    json: '{"id":"1","tags":["a"]}',
    version: 7,
    softExpiresAt: 1_000,
    hardExpiresAt: 2_000,
    deltaMs: 3,
    negative,
  };
  return new L1Row(envelope, 1_500, 400);
};

describe('L1 answers', () => {
  it('carries the row’s version and JSON text, its TTL left and whether it is stale', () => {
    const r = row();
    expect(sharedAnswer(r, () => 750)).toMatchObject({
      found: true,
      layer: 'l1',
      coalesced: false,
      stale: false,
      version: 7,
      ttlMs: 250,
      stored: false,
      json: r.json,
    });
    expect(rowAnswer(r, 1_200, true)).toMatchObject({ stale: true, ttlMs: -200, coalesced: true });
    expect(rowAnswer(r, 900, false, true)).toMatchObject({ stale: true, ttlMs: 0 });
  });

  it('reads a shared answer’s TTL left from its clock when asked', () => {
    let now = 750;
    const a = sharedAnswer(row(), () => now);
    expect([a.ttlMs, a.stale]).toEqual([250, false]);
    now = 1_000;
    expect([a.ttlMs, a.stale]).toEqual([0, true]);
  });

  it('decodes an own answer’s value once, and gives each answer its own copy', () => {
    const r = row();
    const a = rowAnswer(r, 900) as FoundResult;
    const b = rowAnswer(r, 900) as FoundResult;
    expect(a.value).toEqual({ id: '1', tags: ['a'] });
    expect(a.value).toBe(a.value);
    expect(b.value).toEqual(a.value);
    expect(b.value).not.toBe(a.value);
  });

  it('decodes a shared answer’s value on each access: each read a copy of its own', () => {
    const a = sharedAnswer(row(), () => 750);
    const first = a.value as { tags: string[] };
    expect(first).toEqual({ id: '1', tags: ['a'] });
    first.tags.push('changed');
    expect(a.value).toEqual({ id: '1', tags: ['a'] });
    expect(a.value).not.toBe(a.value);
  });

  it('has its plain fields as its own: a spread keeps all but the lazy value', () => {
    for (const a of [sharedAnswer(row(), () => 750), rowAnswer(row(), 750) as FoundResult]) {
      expect(Object.keys(a)).toEqual([
        'found',
        'layer',
        'coalesced',
        'stale',
        'version',
        'ttlMs',
        'stored',
        'json',
      ]);
      expect({ ...a, value: a.value }).toMatchObject({
        found: true,
        layer: 'l1',
        version: 7,
        ttlMs: 250,
        json: '{"id":"1","tags":["a"]}',
        value: { id: '1', tags: ['a'] },
      });
    }
  });

  it('freezes a shared answer: no caller changes what the others read', () => {
    const a = sharedAnswer(row(), () => 750);
    expect(Object.isFrozen(a)).toBe(true);
    expect(() => {
      (a as { ttlMs: number }).ttlMs = 1;
    }).toThrow(TypeError);
    expect(() => {
      a.value = { replaced: true };
    }).toThrow(TypeError);
    expect(a.ttlMs).toBe(250);
  });

  it('decodes a frozen own answer’s value, and takes a new value as any answer does', () => {
    const frozen = Object.freeze(rowAnswer(row(), 750) as FoundResult);
    expect(frozen.value).toEqual({ id: '1', tags: ['a'] });
    expect(JSON.parse(JSON.stringify(frozen))).toMatchObject({ value: { id: '1', tags: ['a'] } });
    const a = rowAnswer(row(), 750) as FoundResult;
    a.value = { replaced: true };
    expect(a.value).toEqual({ replaced: true });
  });

  it('serialises to its plain fields, value included', () => {
    for (const a of [sharedAnswer(row(), () => 750), rowAnswer(row(), 750)]) {
      expect(JSON.parse(JSON.stringify(a))).toEqual({
        found: true,
        layer: 'l1',
        coalesced: false,
        stale: false,
        version: 7,
        ttlMs: 250,
        stored: false,
        json: '{"id":"1","tags":["a"]}',
        value: { id: '1', tags: ['a'] },
      });
    }
  });

  it('takes its entity tag from the row, computed once, and any other answer’s from its JSON', () => {
    const r = row();
    const tag = entityTagOf(sharedAnswer(r, () => 750));
    expect(tag).toBe(entityTag(r.json));
    expect(entityTagOf(rowAnswer(r, 900) as FoundResult)).toBe(tag);
    const other: FoundResult = {
      found: true,
      layer: 'l2',
      coalesced: false,
      stale: false,
      version: 7,
      ttlMs: 250,
      stored: false,
      value: 1,
      json: '1',
    };
    expect(entityTagOf(other)).toBe(entityTag('1'));
  });

  it('answers a cached "not found" as a plain not-found result', () => {
    expect(rowAnswer(row(true), 900)).toEqual({
      found: false,
      layer: 'l1',
      coalesced: false,
      stale: false,
      version: 7,
      ttlMs: 100,
      stored: false,
    });
  });
});
