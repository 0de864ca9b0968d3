/** Zipf-distributed draws, seeded: the key popularity of a cache's real traffic. */
import { mulberry32 } from '../../src/random.js';

/**
 * Draws ranks 1…`n` with P(k) ∝ 1 / k^`s` (rank 1 the most popular), from a
 * PRNG seeded with `seed`, by binary search over the cumulative weights.
 */
export function zipfSampler(n: number, s: number, seed: number): () => number {
  const cdf = new Float64Array(n);
  let sum = 0;
  for (let k = 1; k <= n; k++) {
    sum += 1 / k ** s;
    cdf[k - 1] = sum;
  }
  const random = mulberry32(seed);
  return () => {
    const u = random() * sum;
    let [lo, hi] = [0, n - 1];
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((cdf[mid] as number) < u) lo = mid + 1;
      else hi = mid;
    }
    return lo + 1;
  };
}
