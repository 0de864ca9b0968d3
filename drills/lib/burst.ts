/** A burst of concurrent cold readers of one id, in this process or over HTTP, and what they got. */
import type { Table } from '../../src/store/table.js';
import { errorCode } from './http.js';
import { bump } from './report.js';

/** One reader: resolves with the answer's JSON text, or rejects. */
export type Read = () => Promise<string>;

/** The burst as one process saw it. */
export interface BurstResult {
  /** Per successful reader: ms from the burst's start to its answer. */
  latenciesMs: number[];
  failures: number;
  /** Failed readers by error code (`ECC_*`, `HTTP_<status>`, or the error's name). */
  errorCodes: Record<string, number>;
  /** The distinct answers (JSON text) the readers received. */
  answers: string[];
}

/** Reads `id` through `table.get`: the value's JSON text, `404` when not found. */
export const storeRead =
  (t: Table, id: string): Read =>
  async () => {
    const r = await t.get(id);
    return r.found ? r.json : '404';
  };

/** GETs `url`: the body of a 200; otherwise rejects with the error body's code (or `HTTP_<status>`). */
export const httpRead =
  (url: string): Read =>
  async () => {
    const res = await fetch(url);
    const body = await res.text();
    if (res.status === 200) return body;
    const code = errorCode(body) ?? `HTTP_${res.status}`;
    throw Object.assign(new Error(`GET ${url} answered ${res.status}`), { code });
  };

/** Starts `readers` concurrent `read`s at once and waits for them all. */
export async function burst(read: Read, readers: number): Promise<BurstResult> {
  const started = performance.now();
  const settled = await Promise.allSettled(
    Array.from({ length: readers }, () =>
      read().then((body) => ({ body, ms: performance.now() - started })),
    ),
  );
  const result: BurstResult = { latenciesMs: [], failures: 0, errorCodes: {}, answers: [] };
  for (const s of settled) {
    if (s.status === 'fulfilled') {
      result.latenciesMs.push(s.value.ms);
      result.answers.push(s.value.body);
    } else {
      result.failures++;
      bump(result.errorCodes, errorCode(s.reason) ?? String((s.reason as Error)?.name ?? 'Error'));
    }
  }
  return { ...result, answers: [...new Set(result.answers)] };
}
