/**
 * Warm-up's one loop: read a list of ids through the table's normal read path
 * (cache-aside, so each miss is loaded once and cached), a few at a time.
 * Used by the warm route and by the start-up warm-up.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { EchoStoreError, InternalError, ShedError } from '../errors.js';
import type { Table } from '../store/table.js';

/** How one id ended: read with a value, read as "not found", or failed with an error code. */
export type WarmOutcome =
  | { result: 'warmed' }
  | { result: 'notFound' }
  | { result: 'failed'; code: string };

/** The answer of a warm-up: every id read is counted exactly once. */
export interface WarmAnswer {
  /** Ids now cached with a value (they were in L1 or L2, or the source had them). */
  warmed: number;
  /** Ids the source does not have (now negative-cached). */
  notFound: number;
  /** Ids whose read failed, in list order, with the error code (`ECC_BAD_ID`, `ECC_LOAD_FAILED`, …). */
  failed: { id: string; code: string }[];
}

/** Options of {@link readIds}. */
export interface ReadIdsOptions {
  /** Reads in flight at once (at least 1). */
  concurrency: number;
  /**
   * Times an id shed with `ECC_SHED` is read again, each after the error's
   * `retryAfterMs` (at most 2 s). Default 0: a shed id fails.
   */
  shedRetries?: number;
  /**
   * Once aborted, no further id is started or retried, and the call resolves
   * without waiting for the reads in flight (they go on and fill the cache,
   * uncounted).
   */
  signal?: AbortSignal;
  /** Called as each id settles, in completion order. */
  onSettled?(id: string, outcome: WarmOutcome): void;
  /** Called before each retry of a shed id. */
  onRetry?(id: string): void;
}

/** Longest pause before a shed id is read again, ms. */
const MAX_RETRY_PAUSE_MS = 2_000;

/**
 * Reads every id through `table.get`, at most `concurrency` at a time. A failed
 * read is recorded, never thrown: one bad id does not fail the others.
 *
 * @param ids the ids, duplicates allowed (each occurrence is counted).
 * @param log where a non-store error (a bug) is logged.
 * @returns the counts; with an aborted `signal`, of the ids that settled before it.
 */
export async function readIds(
  table: Table,
  ids: readonly string[],
  log: Pick<Logger, 'error'>,
  options: ReadIdsOptions,
): Promise<WarmAnswer> {
  const { signal, onSettled, onRetry } = options;
  const shedRetries = options.shedRetries ?? 0;
  let warmed = 0;
  let notFound = 0;
  const failures: ({ id: string; code: string } | undefined)[] = [];
  let next = 0;
  const readOne = async (id: string): Promise<WarmOutcome> => {
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await table.get(id);
        return { result: result.found ? 'warmed' : 'notFound' };
      } catch (err) {
        if (err instanceof ShedError && attempt < shedRetries && signal?.aborted !== true) {
          onRetry?.(id);
          const pauseMs = Math.min(MAX_RETRY_PAUSE_MS, Math.max(1, err.retryAfterMs));
          const stopped = await sleep(pauseMs, false, { signal }).catch(() => true);
          if (!stopped) continue;
        }
        if (!(err instanceof EchoStoreError)) log.error({ err, table: table.name }, 'warm-up read');
        return {
          result: 'failed',
          code: err instanceof EchoStoreError ? err.code : InternalError.code,
        };
      }
    }
  };
  const aborted = new Promise<undefined>((resolve) => {
    if (signal?.aborted) resolve(undefined);
    signal?.addEventListener('abort', () => resolve(undefined), { once: true });
  });
  const worker = async (): Promise<void> => {
    while (next < ids.length && signal?.aborted !== true) {
      const index = next++;
      const id = ids[index] as string;
      const outcome = await Promise.race([readOne(id), aborted]);
      if (outcome === undefined) return;
      if (outcome.result === 'warmed') warmed++;
      else if (outcome.result === 'notFound') notFound++;
      else failures[index] = { id, code: outcome.code };
      onSettled?.(id, outcome);
    }
  };
  const workers = Math.max(1, Math.min(options.concurrency, ids.length));
  await Promise.all(Array.from({ length: workers }, worker));
  return { warmed, notFound, failed: failures.filter((f) => f !== undefined) };
}
