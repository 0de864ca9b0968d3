/** The answer of an L1 hit (`answers.ts`): the row's fields, a lazily decoded value of its own. */
import { describe, expect, it } from 'vitest';
import type { Envelope } from '../../src/l2/format.js';
import { entityTagOf, freshAnswer, rowAnswer } from '../../src/store/answers.js';
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
    expect(freshAnswer(r, 250)).toMatchObject({
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

  it('decodes the value once per answer, and gives each answer its own copy', () => {
    const r = row();
    const a = freshAnswer(r, 250);
    const b = freshAnswer(r, 250);
    expect(a.value).toEqual({ id: '1', tags: ['a'] });
    expect(a.value).toBe(a.value);
    expect(b.value).toEqual(a.value);
    expect(b.value).not.toBe(a.value);
  });

  it('has its plain fields as its own: a spread keeps all but the lazy value', () => {
    const a = freshAnswer(row(), 250);
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
      json: '{"id":"1","tags":["a"]}',
      value: { id: '1', tags: ['a'] },
    });
  });

  it('decodes a frozen answer’s value, and takes a new value as any answer does', () => {
    const frozen = Object.freeze(freshAnswer(row(), 250));
    expect(frozen.value).toEqual({ id: '1', tags: ['a'] });
    expect(JSON.parse(JSON.stringify(frozen))).toMatchObject({ value: { id: '1', tags: ['a'] } });
    const a = freshAnswer(row(), 250);
    a.value = { replaced: true };
    expect(a.value).toEqual({ replaced: true });
  });

  it('serialises to its plain fields, value included', () => {
    const a = freshAnswer(row(), 250);
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
  });

  it('takes its entity tag from the row, computed once, and any other answer’s from its JSON', () => {
    const r = row();
    const tag = entityTagOf(freshAnswer(r, 250));
    expect(tag).toBe(entityTag(r.json));
    expect(entityTagOf(freshAnswer(r, 100))).toBe(tag);
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
