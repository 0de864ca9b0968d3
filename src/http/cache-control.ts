/**
 * `Cache-Control` and `Age` of an answered read, so an HTTP cache in front
 * (a CDN, a browser, a reverse proxy) may reuse it (RFC 9111, RFC 5861).
 */
import type { TablePolicy } from '../store/policy.js';
import type { ReadResult } from '../store/types.js';

/** The two headers of a read, values as sent. */
export interface CachingHeaders {
  'cache-control': string;
  age: string;
}

/**
 * The caching headers of `result`, read from a table with `policy`.
 *
 * The store knows how long an answer stays fresh (`ttlMs` left), not when it
 * was loaded, so its age is estimated from the table's soft TTL: a row loaded
 * with the table's `ttlMs` (or `negativeTtlMs`) and `t` ms left is at least
 * `ttlMs − t` old (jitter only lengthens the lifetime); an answer the source
 * just gave is 0 s old. `max-age` is that age plus the time left, so a cache
 * that subtracts `Age` from `max-age` (RFC 9111 §4.2.3) finds exactly the soft
 * TTL left, whatever the estimate:
 *
 *     Cache-Control: max-age=<age + left>, stale-while-revalidate=<staleMs>, stale-if-error=<staleMs>
 *     Age: <age>
 *
 * Whole seconds, rounded down (an answer is never called fresher than it is).
 * The stale directives (RFC 5861) carry the table's stale window and are left
 * out for "not found" answers, which are never served stale.
 *
 * @returns the headers, or `undefined` when `policy.cacheHeaders` is false.
 */
export function cachingHeaders(
  result: ReadResult,
  policy: TablePolicy,
): CachingHeaders | undefined {
  if (!policy.cacheHeaders) return undefined;
  const lifetimeMs = result.found ? policy.ttlMs : policy.negativeTtlMs;
  const ageMs = result.layer === 'origin' ? 0 : Math.max(0, lifetimeMs - result.ttlMs);
  const ageS = Math.floor(ageMs / 1000);
  // Truncated toward zero, as Cache-Status's ttl is: max-age − Age is that ttl, stale or not.
  const maxAgeS = Math.max(0, ageS + Math.trunc(result.ttlMs / 1000));
  let directives = `max-age=${maxAgeS}`;
  if (result.found && policy.staleMs > 0) {
    const staleS = Math.floor(policy.staleMs / 1000);
    directives += `, stale-while-revalidate=${staleS}, stale-if-error=${staleS}`;
  }
  return { 'cache-control': directives, age: String(ageS) };
}
