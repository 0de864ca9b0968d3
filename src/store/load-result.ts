/**
 * A loader's answer with a policy of its own for that one row (`withPolicy`).
 */
/** Per-row overrides of the table's freshness policy, returned by a loader via {@link withPolicy}. */
export interface RowPolicy {
  /** Soft TTL of this row, ms (default: the table's `ttlMs`, or `negativeTtlMs` for not-found). */
  ttlMs?: number;
  /** Stale window of this row, ms (default: the table's `staleMs`; always 0 for not-found). */
  staleMs?: number;
  /** Cache this row as "not found" (negative caching). */
  negative?: boolean;
  /**
   * The row's purge tags (`Table.purge({ tags })` reaches it by any of them): at most 64, each
   * 1–128 visible ASCII characters but `|`; beyond that the load fails with `ECC_BAD_ROW_TAGS`.
   */
  tags?: readonly string[];
}

/** A loader's answer with its own policy; build it with {@link withPolicy}. */
export class LoadResult {
  readonly value: unknown;
  readonly policy: RowPolicy;
  /**
   * The value's JSON text as the source sent it (an http source's body), stored as is instead
   * of `JSON.stringify(value)`, so that what `JSON.parse` would change (an integer past 2^53)
   * is kept; `JSON.parse(json)` is `value`. Undefined: the value is serialised.
   */
  readonly json: string | undefined;

  constructor(value: unknown, policy: RowPolicy, json?: string) {
    this.value = value;
    this.policy = policy;
    this.json = json;
  }
}

/**
 * Lets a loader set the policy of one row, e.g. an origin's `Cache-Control: max-age`:
 * `return withPolicy(row, { ttlMs: 5_000 })`, or `withPolicy(undefined, { ttlMs: 1_000 })`
 * for a short-lived "not found", or `withPolicy(row, { tags: ['category:5'] })` for a row a
 * purge of that tag reaches.
 *
 * @throws {TypeError} when a duration is not a non-negative integer (ttlMs at least 1), or
 *   `tags` is not an array (its bounds are checked when the row is stored: `ECC_BAD_ROW_TAGS`).
 */
export function withPolicy(value: unknown, policy: RowPolicy): LoadResult {
  const { ttlMs, staleMs, tags } = policy;
  if (tags !== undefined && !Array.isArray(tags)) {
    throw new TypeError('withPolicy: tags must be an array of strings');
  }
  if (ttlMs !== undefined && !(Number.isSafeInteger(ttlMs) && ttlMs >= 1)) {
    throw new TypeError('withPolicy: ttlMs must be an integer >= 1 (milliseconds)');
  }
  if (staleMs !== undefined && !(Number.isSafeInteger(staleMs) && staleMs >= 0)) {
    throw new TypeError('withPolicy: staleMs must be an integer >= 0 (milliseconds)');
  }
  return new LoadResult(value, { ...policy });
}
