import { describe, expect, it } from 'vitest';
import { cacheStatus } from '../../src/http/items.js';
import type { ReadLayer, ReadResult } from '../../src/store/types.js';

/** A read answer with only the fields `Cache-Status` looks at set. */
function read(
  layer: ReadLayer,
  fields: {
    found?: boolean;
    stale?: boolean;
    coalesced?: boolean;
    ttlMs?: number;
    stored?: boolean;
  } = {},
): ReadResult {
  const {
    found = true,
    stale = false,
    coalesced = false,
    ttlMs = 60_000,
    stored = layer === 'origin',
  } = fields;
  const base = { layer, coalesced, stale, ttlMs, version: 1, stored };
  return found ? { ...base, found: true, value: 1, json: '1' } : { ...base, found: false };
}

describe('Cache-Status (RFC 9211)', () => {
  it.each([
    ['l1', 'echostore; hit; ttl=60; detail=l1'],
    ['l2', 'echostore; hit; ttl=60; detail=l2'],
  ] as const)('a fresh hit from %s', (layer, header) => {
    expect(cacheStatus(read(layer))).toBe(header);
  });

  it.each([
    ['l1', 'echostore; hit; ttl=60; detail=l1-negative'],
    ['l2', 'echostore; hit; ttl=60; detail=l2-negative'],
  ] as const)('a negative hit from %s ("not found" answered by the cache)', (layer, header) => {
    expect(cacheStatus(read(layer, { found: false }))).toBe(header);
  });

  it.each([
    ['l1', 'echostore; hit; ttl=-2; detail=l1-stale'],
    ['l2', 'echostore; hit; ttl=-2; detail=l2-stale'],
  ] as const)(
    'a stale hit from %s says how long ago it went stale (negative ttl)',
    (layer, header) => {
      expect(cacheStatus(read(layer, { stale: true, ttlMs: -2_500 }))).toBe(header);
    },
  );

  it('ttl is whole seconds toward zero: 0.2 s stale is ttl=0, 1.9 s left is ttl=1', () => {
    expect(cacheStatus(read('l1', { stale: true, ttlMs: -200 }))).toBe(
      'echostore; hit; ttl=0; detail=l1-stale',
    );
    expect(cacheStatus(read('l1', { ttlMs: 1_900 }))).toBe('echostore; hit; ttl=1; detail=l1');
  });

  it('an origin miss that found the item: fwd=miss; fwd-status=200; stored', () => {
    expect(cacheStatus(read('origin'))).toBe('echostore; fwd=miss; fwd-status=200; stored; ttl=60');
  });

  it('an origin miss that did not find it: fwd-status=404', () => {
    expect(cacheStatus(read('origin', { found: false, ttlMs: 5_000 }))).toBe(
      'echostore; fwd=miss; fwd-status=404; stored; ttl=5',
    );
  });

  it('a caller that attached to another caller’s flight is collapsed', () => {
    expect(cacheStatus(read('origin', { coalesced: true }))).toBe(
      'echostore; fwd=miss; fwd-status=200; stored; ttl=60; collapsed',
    );
    expect(cacheStatus(read('origin', { found: false, coalesced: true }))).toBe(
      'echostore; fwd=miss; fwd-status=404; stored; ttl=60; collapsed',
    );
  });

  it('an origin answer that was not kept (a refused fill, or a write meanwhile) does not say stored', () => {
    expect(cacheStatus(read('origin', { stored: false }))).toBe(
      'echostore; fwd=miss; fwd-status=200; ttl=60',
    );
  });
});
