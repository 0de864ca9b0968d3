/**
 * One instance of the storm drill, forked by `drills/storm.ts`: a store on the
 * origin, then at the appointed moment `reads` reads of Zipf-distributed keys
 * from `concurrency` loops; it reports what it read and what it got.
 */
import type { ValkeyOptions } from '../src/valkey/client.js';
import { errorCode } from './lib/http.js';
import { bump } from './lib/report.js';
import { loadFetch, originStore } from './lib/store.js';
import { runWorker } from './lib/workers.js';
import { zipfSampler } from './lib/zipf.js';

/** The first message from the parent. */
export interface StormSetup {
  kind: 'setup';
  table: string;
  /** Key `i` (1 = the most popular) is `<prefix><i>`. */
  prefix: string;
  keys: number;
  zipf: number;
  reads: number;
  concurrency: number;
  /** Seeds this worker's key sequence. */
  seed: number;
  valkey: string | ValkeyOptions;
  template: string;
  policy: Record<string, unknown>;
}

/** What one worker saw. */
export interface StormResult {
  /** Per distinct key read: the answers it got (JSON text, deduplicated). */
  answers: Record<string, string[]>;
  latenciesMs: number[];
  failures: number;
  errorCodes: Record<string, number>;
  /** Answers by layer (`l1`, `l2`, `origin`). */
  layers: Record<string, number>;
  durationMs: number;
}

runWorker<StormSetup>(async (setup) => {
  const { store, close } = await originStore(setup.valkey, setup.table, setup.template, {
    coalescing: 'fleet',
    ...setup.policy,
  });
  await loadFetch(setup.template);
  const table = store.table(setup.table);
  const next = zipfSampler(setup.keys, setup.zipf, setup.seed);
  const run = async (): Promise<StormResult> => {
    const answers = new Map<string, Set<string>>();
    const result: StormResult = {
      answers: {},
      latenciesMs: [],
      failures: 0,
      errorCodes: {},
      layers: {},
      durationMs: 0,
    };
    let issued = 0;
    const started = performance.now();
    const loop = async () => {
      while (issued < setup.reads) {
        issued++;
        const id = `${setup.prefix}${next()}`;
        const t0 = performance.now();
        try {
          const r = await table.get(id);
          result.latenciesMs.push(performance.now() - t0);
          bump(result.layers, r.layer);
          let seen = answers.get(id);
          if (seen === undefined) {
            seen = new Set();
            answers.set(id, seen);
          }
          seen.add(r.found ? r.json : '404');
        } catch (err) {
          result.failures++;
          bump(result.errorCodes, errorCode(err) ?? String((err as Error)?.name));
        }
      }
    };
    await Promise.all(Array.from({ length: setup.concurrency }, loop));
    result.durationMs = performance.now() - started;
    for (const [id, seen] of answers) result.answers[id] = [...seen];
    return result;
  };
  return { run, close };
});
