/** Concurrent readers of ids, through a store in this process or over HTTP, and what they got. */
import type { Table } from '../../src/store/table.js';
import { errorCode, itemUrl } from './http.js';
import { inLanes } from './load.js';
import { bump } from './report.js';

/** One read of `id`: the answer's JSON text and the layer that gave it, or a rejection. */
export type Read = (id: string) => Promise<{ json: string; layer: string }>;

/** What the readers of one process saw. */
export interface ReadsResult {
  /** Per id read: the distinct answers it got (JSON text). */
  answers: Record<string, string[]>;
  /** Per successful read: ms from its start to its answer. */
  latenciesMs: number[];
  failures: number;
  /** Failed reads by error code (`ECC_*`, `HTTP_<status>`, or the error's name). */
  errorCodes: Record<string, number>;
  /** Answers by layer (`l1`, `l2`, `origin`; `http` over HTTP). */
  layers: Record<string, number>;
  durationMs: number;
}

/** Reads through `table.get`: the value's JSON text (`404` when not found). */
export const storeRead =
  (t: Table): Read =>
  async (id) => {
    const r = await t.get(id);
    return { json: r.found ? r.json : '404', layer: r.layer };
  };

/** GETs the item on the service at `base`: the body of a 200; otherwise rejects with its code. */
export const httpRead =
  (base: string, table: string): Read =>
  async (id) => {
    const res = await fetch(itemUrl(base, table, id));
    const json = await res.text();
    if (res.status === 200) return { json, layer: 'http' };
    const code = errorCode(json) ?? `HTTP_${res.status}`;
    throw Object.assign(new Error(`GET ${res.url} answered ${res.status}`), { code });
  };

/** `count` reads, of `next(i)` for the i-th, from `lanes` concurrent loops (all started at once). */
export async function readMany(
  read: Read,
  next: (i: number) => string,
  count: number,
  lanes = count,
): Promise<ReadsResult> {
  const seen = new Map<string, Set<string>>();
  const r: ReadsResult = {
    ...{ answers: {}, latenciesMs: [], failures: 0 },
    ...{ errorCodes: {}, layers: {}, durationMs: 0 },
  };
  const turns = Array.from({ length: count }, (_, i) => i);
  const started = performance.now();
  await inLanes(lanes, turns, async (i) => {
    const id = next(i);
    const t0 = performance.now();
    try {
      const { json, layer } = await read(id);
      r.latenciesMs.push(performance.now() - t0);
      bump(r.layers, layer);
      seen.set(id, (seen.get(id) ?? new Set()).add(json));
    } catch (err) {
      r.failures++;
      bump(r.errorCodes, errorCode(err) ?? String((err as Error)?.name ?? 'Error'));
    }
  });
  r.durationMs = performance.now() - started;
  for (const [id, answers] of seen) r.answers[id] = [...answers];
  return r;
}
