/**
 * Batched loading, after Facebook's DataLoader: the misses of one table that
 * reach the loader within one tick (or `batchWindowMs`) go to the source as
 * one `loadMany(ids)` call, while each id keeps its own flight, lease,
 * waiters and timeout. The table's `load` *becomes* this batching function,
 * built once per table, so the flight runner does not know batches exist.
 */
import DataLoader from 'dataloader';
import type { LoadContext, LoadFn, LoadManyFn } from './types.js';

/** Tuning of {@link batchingLoader}. */
export interface BatchOptions {
  /**
   * How long the first id of a batch waits for others, ms. 0: one turn of the
   * event loop (`setImmediate`), which gathers every miss that the same I/O
   * (one Valkey reply, one HTTP request) produced.
   */
  batchWindowMs: number;
  /** Most ids in one `loadMany` call; a full batch is sent at once. */
  maxBatchSize: number;
  /** Called once per `loadMany` call with the number of distinct ids in it (counting). */
  onBatch?(size: number): void;
}

/** One id's call of the batching loader: DataLoader's key. */
interface Call {
  id: string;
  signal: AbortSignal;
}

/**
 * Builds a per-id loader over `loadMany`, on Facebook's `dataloader` with its
 * cache off (caching and coalescing are the store's): each call joins the
 * open batch; the batch is sent when `maxBatchSize` ids are in it or its
 * window closes. Its answer settles each id's call:
 *
 * - `loadMany` resolves with a `Map` from id to value: the id's value;
 *   an id absent from the map (or mapped to `undefined`) is "not found";
 *   an id mapped to an `Error` fails that id alone (DataLoader's rule);
 * - `loadMany` rejects, throws, or resolves with something other than a
 *   `Map`: every id of the batch fails with that error (the store answers
 *   each with `ECC_LOAD_FAILED`).
 *
 * An id asked twice in one window (coalescing `none`) is sent once and
 * answers both calls. The batch's `signal` is aborted once the signal of
 * every call in it is (each id's timeout still fails that id at once).
 */
export function batchingLoader(loadMany: LoadManyFn, options: BatchOptions): LoadFn {
  const { batchWindowMs, maxBatchSize, onBatch } = options;
  const loader = new DataLoader<Call, unknown>((calls) => loadBatch(loadMany, calls, onBatch), {
    cache: false,
    maxBatchSize,
    batchScheduleFn: (send) => schedule(send, batchWindowMs),
  });
  return (id: string, { signal }: LoadContext) => loader.load({ id, signal });
}

/** Runs `fn` after `ms` (0: on the next turn of the event loop, gathering the misses of one I/O). */
function schedule(fn: () => void, ms: number): void {
  if (ms <= 0) setImmediate(fn);
  else setTimeout(fn, ms);
}

/** One `loadMany` call for a batch of calls: its values in the calls' order (an `Error` fails that call). */
async function loadBatch(
  loadMany: LoadManyFn,
  calls: readonly Call[],
  onBatch: ((size: number) => void) | undefined,
): Promise<unknown[]> {
  const ids = [...new Set(calls.map((c) => c.id))];
  onBatch?.(ids.length);
  const abort = abortedByAll(calls.map((c) => c.signal));
  try {
    const answer: unknown = await loadMany(ids, { signal: abort.signal });
    if (!(answer instanceof Map)) {
      throw new TypeError('loadMany must resolve with a Map from id to value');
    }
    return calls.map((c) => answer.get(c.id));
  } finally {
    abort.dispose();
  }
}

/** A controller aborted once every one of `signals` is (with the last one's reason). */
function abortedByAll(signals: AbortSignal[]): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  let left = signals.filter((s) => !s.aborted).length;
  if (left === 0) {
    controller.abort(signals[signals.length - 1]?.reason);
    return { signal: controller.signal, dispose() {} };
  }
  const listeners: Array<[AbortSignal, () => void]> = [];
  for (const s of signals) {
    if (s.aborted) continue;
    const onAbort = () => {
      if (--left === 0) controller.abort(s.reason);
    };
    s.addEventListener('abort', onAbort, { once: true });
    listeners.push([s, onAbort]);
  }
  return {
    signal: controller.signal,
    dispose() {
      for (const [s, onAbort] of listeners) s.removeEventListener('abort', onAbort);
    },
  };
}
