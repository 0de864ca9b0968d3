/**
 * The expiry drill's record of reads: every read an instance makes, column by
 * column, and its summary per value generation (what `expiry-worker` reports).
 */
import type { ReadLayer, ReadResult } from '../../src/store/types.js';
import { percentile } from './report.js';

/** What one instance's reads saw of one value (a generation: the origin's read number `gen`). */
export interface GenerationSeen {
  gen: number;
  version: number;
  /** Soft expiry of this value, epoch ms (as its readers computed it: answer time + ttlMs). */
  softAtMs: number;
  reads: number;
  bySource: Record<ReadLayer, number>;
  stale: number;
  waited: number;
  firstAtMs: number;
  lastAtMs: number;
  /** First and last stale read of this value, epoch ms (undefined when none). */
  firstStaleAtMs: number | undefined;
  lastStaleAtMs: number | undefined;
  maxMs: number;
}

/** A read that waited on the loader (or failed). */
export interface SlowRead {
  atMs: number;
  ms: number;
  source: ReadLayer | 'error';
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

/** Every read, column by column (a few hundred thousand per run). */
export class ReadLog {
  atMs: number[] = [];
  ms: number[] = [];
  gen: number[] = [];
  version: number[] = [];
  softAtMs: number[] = [];
  source: Array<ReadLayer | 'error'> = [];
  stale: boolean[] = [];
  waited: boolean[] = [];
  codes = new Map<number, string>();

  add(atMs: number, ms: number, r: ReadResult | undefined, waited: boolean, code?: string): void {
    const i = this.atMs.length;
    this.atMs.push(atMs);
    this.ms.push(ms);
    const read = r?.found ? (r.value as { read?: unknown }).read : undefined;
    this.gen.push(typeof read === 'number' ? read : 0);
    this.version.push(r?.version ?? 0);
    this.softAtMs.push(r === undefined ? 0 : Math.round(atMs + ms + r.ttlMs));
    this.source.push(r?.layer ?? 'error');
    this.stale.push(r?.stale ?? false);
    this.waited.push(waited);
    if (code !== undefined) this.codes.set(i, code);
  }
}

export function summarize(log: ReadLog, maxSlowReads: number): ReadSummary {
  const gens = new Map<number, GenerationSeen>();
  const slowReads: SlowRead[] = [];
  const errorCodes: Record<string, number> = {};
  let waited = 0;
  let failures = 0;
  for (let i = 0; i < log.atMs.length; i++) {
    const atMs = log.atMs[i] as number;
    const ms = log.ms[i] as number;
    const source = log.source[i] as ReadLayer | 'error';
    const stale = log.stale[i] as boolean;
    const gen = log.gen[i] as number;
    const code = log.codes.get(i);
    if (log.waited[i]) waited++;
    if (source === 'error') {
      failures++;
      errorCodes[code ?? 'Error'] = (errorCodes[code ?? 'Error'] ?? 0) + 1;
    }
    if ((log.waited[i] || source === 'error') && slowReads.length < maxSlowReads) {
      slowReads.push({
        atMs,
        ms: round(ms),
        source,
        gen,
        stale,
        waited: log.waited[i] as boolean,
        code,
      });
    }
    if (source === 'error') continue;
    let g = gens.get(gen);
    if (g === undefined) {
      g = {
        gen,
        version: log.version[i] as number,
        softAtMs: log.softAtMs[i] as number,
        reads: 0,
        bySource: { l1: 0, l2: 0, origin: 0 },
        stale: 0,
        waited: 0,
        firstAtMs: atMs,
        lastAtMs: atMs,
        firstStaleAtMs: undefined,
        lastStaleAtMs: undefined,
        maxMs: 0,
      };
      gens.set(gen, g);
    }
    g.reads++;
    g.bySource[source]++;
    if (log.waited[i]) g.waited++;
    g.lastAtMs = atMs;
    g.maxMs = Math.max(g.maxMs, round(ms));
    if (stale) {
      g.stale++;
      g.firstStaleAtMs ??= atMs;
      g.lastStaleAtMs = atMs;
    }
  }
  return {
    reads: log.atMs.length,
    generations: [...gens.values()].sort((a, b) => a.gen - b.gen),
    slowReads,
    waited,
    failures,
    errorCodes,
    p50Ms: round(percentile(log.ms, 50)),
    p99Ms: round(percentile(log.ms, 99)),
    maxMs: round(log.ms.reduce((m, x) => Math.max(m, x), 0)),
  };
}

function round(ms: number): number {
  return Number(ms.toFixed(2));
}
