/**
 * The consistency drill's accounting (Polaris's idea, counted against the
 * database): each read's start time, id and the version it got; each
 * commit's time by id and version; a read is stale at bound δ when a newer
 * version of its id had committed more than δ before the read started.
 */
import { percentile, round } from './report.js';

/** Stale-read bounds after a commit, ms. */
export const BOUNDS_MS = [0, 100, 1_000] as const;

/** Commits and reads as they happened (times on this process's monotonic clock, ms). */
export class Ledger {
  /** Per id: version → when its commit returned to the writer. */
  readonly #commits = new Map<string, Map<number, number>>();
  #readIds: string[] = [];
  #readVersions: number[] = [];
  #readStarts: number[] = [];

  committed(id: string, version: number, atMs: number): void {
    const byVersion = this.#commits.get(id) ?? new Map<number, number>();
    this.#commits.set(id, byVersion);
    byVersion.set(version, atMs);
  }

  read(id: string, version: number, startedMs: number): void {
    this.#readIds.push(id);
    this.#readVersions.push(version);
    this.#readStarts.push(startedMs);
  }

  get reads(): number {
    return this.#readIds.length;
  }

  get commits(): number {
    let n = 0;
    for (const m of this.#commits.values()) n += m.size;
    return n;
  }

  /** Stale reads at each bound: the next version after the one read had committed more than δ before the read began. */
  stale(): number[] {
    const counts = BOUNDS_MS.map(() => 0);
    for (let i = 0; i < this.#readIds.length; i++) {
      const next = this.#commits
        .get(this.#readIds[i] as string)
        ?.get((this.#readVersions[i] as number) + 1);
      if (next === undefined) continue;
      const late = (this.#readStarts[i] as number) - next;
      BOUNDS_MS.forEach((bound, b) => {
        if (late > bound) counts[b] = (counts[b] as number) + 1;
      });
    }
    return counts;
  }
}

/** `-log10(stale / reads)`: six nines is one stale read per million; Infinity for none. */
export const nines = (stale: number, reads: number) =>
  stale === 0 ? Number.POSITIVE_INFINITY : round(-Math.log10(stale / reads), 2);

/** Lag figures of commit → no instance serves an older version, ms. */
export function lagOf(lags: Array<{ ms: number }>, never: number) {
  const samples = lags.map((l) => l.ms);
  return {
    p50Ms: round(percentile(samples, 50), 1),
    p99Ms: round(percentile(samples, 99), 1),
    maxMs: round(
      samples.reduce((a, b) => Math.max(a, b), 0),
      1,
    ),
    measured: samples.length,
    never,
  };
}
