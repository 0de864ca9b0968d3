import type { ReadResult } from '../store/types.js';

/** The cache's name in `Cache-Status` (RFC 9211 §2). */
export const CACHE_NAME = 'echostore';

/**
 * The `Cache-Status` header value of a read (RFC 9211).
 *
 * - answered by L1 or L2: `echostore; hit; ttl=<s>; detail=l1|l2|l1-negative|l2-negative`;
 *   served stale (stale-while-revalidate, stale-if-error): `detail=l1-stale|l2-stale`
 *   and a negative `ttl` (RFC 9211 §2.6: how long ago it went stale)
 * - answered by the source: `echostore; fwd=miss; fwd-status=200|404; stored`,
 *   plus `; collapsed` when this request attached to another's flight.
 *
 * `ttl` is the remaining freshness lifetime (soft TTL) in whole seconds.
 */
export function cacheStatus(result: ReadResult): string {
  // Whole seconds, toward zero: a value stale for 0.2 s says ttl=0, not -1.
  const ttl = Math.trunc(result.ttlMs / 1000);
  if (result.layer === 'origin') {
    const status = result.found ? 200 : 404;
    const collapsed = result.coalesced ? '; collapsed' : '';
    return `${CACHE_NAME}; fwd=miss; fwd-status=${status}; stored; ttl=${ttl}${collapsed}`;
  }
  const detail = !result.found
    ? `${result.layer}-negative`
    : result.stale
      ? `${result.layer}-stale`
      : result.layer;
  return `${CACHE_NAME}; hit; ttl=${ttl}; detail=${detail}`;
}
