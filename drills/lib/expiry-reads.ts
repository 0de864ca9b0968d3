/**
 * The expiry drill's record of one instance's reads (a few hundred thousand
 * per run), summarised as they happen: per value generation, and every read
 * that waited or failed (what `expiry-worker` reports).
 */
import type { ReadResult } from '../../src/store/types.js';
import { bump, p50p99, round } from './report.js';
import type { Layer } from './store.js';

/** What one instance's reads saw of one value (a generation: the origin's read number `gen`). */
export interface GenerationSeen {
  gen: number;
  /** Soft expiry of this value, epoch ms (as its first reader computed it: answer time + ttlMs). */
  softAtMs: number;
  /** Reads answered with it stale, and the last of them, epoch ms (undefined when none). */
  stale: number;
  lastStaleAtMs: number | undefined;
}

/** A read that waited on the loader (or failed). */
export interface SlowRead {
  atMs: number;
  ms: number;
  source: Layer | 'error';
  /** The value's generation; 0 for a failed read. */
  gen: number;
  stale: boolean;
  /** It waited on the loader (a failed read may not have). */
  waited: boolean;
  code: string | undefined;
}

/** An instance's reads, summarised. */
export interface ReadSummary {
  reads: number;
  generations: GenerationSeen[];
  /** Reads that waited or failed, in order; at most `maxSlowReads`. */
  slowReads: SlowRead[];
  waited: number;
  failures: number;
  errorCodes: Record<string, number>;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** Collects reads (`add`) and summarises them (`summary`). */
export class ReadLog {
  readonly #ms: number[] = [];
  readonly #gens = new Map<number, GenerationSeen>();
  readonly #s = {
    slowReads: [] as SlowRead[],
    waited: 0,
    failures: 0,
    errorCodes: {} as Record<string, number>,
  };

  constructor(readonly maxSlowReads: number) {}

  /** One read that started at `atMs` (epoch) and took `ms`; `r` undefined when it failed with `code`. */
  add(atMs: number, ms: number, r: ReadResult | undefined, waited: boolean, code?: string): void {
    const s = this.#s;
    this.#ms.push(ms);
    if (waited) s.waited++;
    const read = r?.found ? (r.value as { read?: unknown }).read : undefined;
    const gen = typeof read === 'number' ? read : 0;
    const stale = r?.stale ?? false;
    if (r === undefined) {
      s.failures++;
      bump(s.errorCodes, code ?? 'Error');
    }
    if ((waited || r === undefined) && s.slowReads.length < this.maxSlowReads) {
      const source = r === undefined ? 'error' : r.layer;
      s.slowReads.push({ atMs, ms: round(ms), source, gen, stale, waited, code });
    }
    if (r === undefined) return;
    const softAtMs = Math.round(atMs + ms + r.ttlMs);
    const g = this.#gens.get(gen) ?? { gen, softAtMs, stale: 0, lastStaleAtMs: undefined };
    this.#gens.set(gen, g);
    if (stale) {
      g.stale++;
      g.lastStaleAtMs = atMs;
    }
  }

  summary(): ReadSummary {
    return {
      reads: this.#ms.length,
      generations: [...this.#gens.values()].sort((a, b) => a.gen - b.gen),
      ...this.#s,
      ...p50p99(this.#ms),
      maxMs: round(this.#ms.reduce((m, x) => Math.max(m, x), 0)),
    };
  }
}
