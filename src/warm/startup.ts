/**
 * The start-up warm-up: for each table with a `warm` section, read its ids
 * (listed, from a file, or the source's top N) into the cache before `/readyz`
 * says ready. Reads go through the normal read path, so they are bounded by
 * the table's load limit like any miss; the warm-up keeps only a few in
 * flight (`warm.concurrency`), retries an id shed with `ECC_SHED` after its
 * `Retry-After`, and gives up after `warm.timeoutMs`. Progress is logged
 * (done/total, failures) and exported as metrics.
 */

import type { Static } from '@sinclair/typebox';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { readFileUpTo } from '../config/bounded-read.js';
import { MAX_STARTUP_WARM_IDS, type WarmSchema } from '../config/schema.js';
import { ConfigError } from '../errors.js';
import type { Source } from '../sources/source.js';
import { MAX_ID_BYTES, type Table } from '../store/table.js';
import { readIds, type WarmOutcome } from './read-ids.js';

/** A table's `warm` section as written: exactly one of `ids`, `file`, `top`. */
export type WarmConfig = Static<typeof WarmSchema>;

/** Times a warm-up read shed with `ECC_SHED` is retried. */
export const WARM_SHED_RETRIES = 3;
/** How often a running table warm-up logs its progress, ms. */
const PROGRESS_EVERY_MS = 2_000;

/** One table's warm-up, ready to run. */
export interface WarmPlan {
  table: Table;
  ids: readonly string[];
  /** Reads in flight at once. */
  concurrency: number;
  /** The table's warm-up stops after this long, ms. */
  timeoutMs: number;
}

/** How one table's warm-up ended. */
export interface WarmReport {
  table: string;
  total: number;
  warmed: number;
  notFound: number;
  failed: number;
  /** Ids not read: the warm-up timed out or the service began to shut down. */
  skipped: number;
  /** Reads retried after `ECC_SHED`. */
  retries: number;
  /** Failures by error code. */
  codes: Record<string, number>;
  ms: number;
}

/**
 * The ids table `table`'s `warm` section names: `ids` as given, the lines of
 * `file`, or the first `top` ids `source.listIds` returns. A source that
 * fails to list its ids is logged, and the table is not warmed (no ids): the
 * service starts anyway.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming `tables.<table>.warm.file` when the file cannot
 *   be read or holds more than {@link MAX_STARTUP_WARM_IDS} ids, or `tables.<table>.warm.top`
 *   when the source cannot list ids.
 */
export async function warmIds(
  config: WarmConfig,
  source: Source,
  table: string,
  log: Logger,
): Promise<string[]> {
  const field = `tables.${table}.warm`;
  if (config.ids !== undefined) return [...config.ids];
  if (config.file !== undefined) return idsFile(config.file, `${field}.file`);
  const top = config.top as number;
  if (source.listIds === undefined) throw cannotListIds(table);
  try {
    const started = performance.now();
    const ids = await source.listIds(top);
    const ms = Math.round(performance.now() - started);
    log.info({ table, top, listed: ids.length, ms }, 'warm-up: the source listed its top ids');
    return ids;
  } catch (err) {
    log.error({ err, table }, 'warm-up: the source could not list ids; the table is not warmed');
    return [];
  }
}

/** The start-up error of a `warm.top` whose table's source cannot list ids. */
export function cannotListIds(table: string): ConfigError {
  const field = `tables.${table}.warm.top`;
  return new ConfigError(
    `${field}: the table's source cannot list ids (an sqlite, postgres or mysql source needs idsQuery)`,
    { field },
  );
}

/**
 * A warm-up ids file: {@link MAX_STARTUP_WARM_IDS} ids of the longest id
 * ({@link MAX_ID_BYTES}) with CRLF each; a larger file breaks one of those two limits.
 */
export const MAX_IDS_FILE_BYTES = MAX_STARTUP_WARM_IDS * (MAX_ID_BYTES + 2);

/**
 * The ids of a file: one per line, a trailing CR dropped, empty lines skipped.
 *
 * @throws {ConfigError} naming `field` when it cannot be read or holds more than {@link MAX_STARTUP_WARM_IDS} ids.
 */
export function idsFile(file: string, field: string): string[] {
  let text: string;
  try {
    text = readFileUpTo(file, MAX_IDS_FILE_BYTES);
  } catch (err) {
    throw new ConfigError(`${field}: cannot read ${file}: ${(err as Error).message}`, {
      field,
      cause: err,
    });
  }
  const ids = text
    .split('\n')
    .map((line) => (line.endsWith('\r') ? line.slice(0, -1) : line))
    .filter((line) => line !== '');
  if (ids.length > MAX_STARTUP_WARM_IDS) {
    throw new ConfigError(
      `${field}: ${file} holds ${ids.length} ids, more than ${MAX_STARTUP_WARM_IDS}`,
      { field },
    );
  }
  return ids;
}

/**
 * Runs the start-up warm-up and exports it: registered on `registry` at
 * construction (every series of every table at 0), so dashboards see it
 * before the first warm-up starts.
 */
export class StartupWarmUp {
  readonly #ids: Gauge<'table'>;
  readonly #reads: Counter<'table' | 'result'>;
  readonly #retries: Counter<'table'>;
  readonly #running: Gauge;

  /** @param tables every table's name, so each has its series from the first scrape. */
  constructor(registry: Registry, tables: readonly string[]) {
    const registers = [registry];
    this.#ids = new Gauge({
      name: 'echostore_warmup_ids',
      help: 'Ids the start-up warm-up of the table reads (0: none).',
      labelNames: ['table'],
      registers,
    });
    this.#reads = new Counter({
      name: 'echostore_warmup_reads_total',
      help: 'Start-up warm-up ids done, by result: warmed (cached with a value), not_found (negative-cached), failed, skipped (not read: timed out or shutting down).',
      labelNames: ['table', 'result'],
      registers,
    });
    this.#retries = new Counter({
      name: 'echostore_warmup_retries_total',
      help: 'Start-up warm-up reads retried after ECC_SHED.',
      labelNames: ['table'],
      registers,
    });
    this.#running = new Gauge({
      name: 'echostore_warmup_running',
      help: '1 while the start-up warm-up runs (/readyz answers 503 warming), else 0.',
      registers,
    });
    for (const table of tables) {
      this.#ids.set({ table }, 0);
      this.#retries.inc({ table }, 0);
      for (const result of ['warmed', 'not_found', 'failed', 'skipped']) {
        this.#reads.inc({ table, result }, 0);
      }
    }
  }

  /**
   * Warms every plan's table at once (each at its own concurrency) and
   * resolves when all have ended; never rejects.
   *
   * @param signal aborted when the service begins to shut down: no further id is read.
   */
  async run(plans: readonly WarmPlan[], log: Logger, signal: AbortSignal): Promise<WarmReport[]> {
    this.#running.set(1);
    try {
      return await Promise.all(plans.map((plan) => this.#warm(plan, log, signal)));
    } finally {
      this.#running.set(0);
    }
  }

  async #warm(plan: WarmPlan, log: Logger, stop: AbortSignal): Promise<WarmReport> {
    const table = plan.table.name;
    const started = performance.now();
    const report: WarmReport = {
      table,
      total: plan.ids.length,
      warmed: 0,
      notFound: 0,
      failed: 0,
      skipped: 0,
      retries: 0,
      codes: {},
      ms: 0,
    };
    this.#ids.set({ table }, plan.ids.length);
    log.info({ table, total: report.total, concurrency: plan.concurrency }, 'warm-up started');
    const done = () => report.warmed + report.notFound + report.failed;
    const progress = setInterval(() => {
      log.info(
        { table, done: done(), total: report.total, failed: report.failed },
        'warm-up progress',
      );
    }, PROGRESS_EVERY_MS);
    const settled = (_id: string, outcome: WarmOutcome) => {
      if (outcome.result === 'failed') {
        report.failed++;
        report.codes[outcome.code] = (report.codes[outcome.code] ?? 0) + 1;
      } else report[outcome.result]++;
      this.#reads.inc({
        table,
        result: outcome.result === 'notFound' ? 'not_found' : outcome.result,
      });
    };
    try {
      await readIds(plan.table, plan.ids, log, {
        concurrency: plan.concurrency,
        shedRetries: WARM_SHED_RETRIES,
        signal: AbortSignal.any([stop, AbortSignal.timeout(plan.timeoutMs)]),
        onSettled: settled,
        onRetry: () => {
          report.retries++;
          this.#retries.inc({ table });
        },
      });
    } finally {
      clearInterval(progress);
    }
    report.skipped = report.total - done();
    this.#reads.inc({ table, result: 'skipped' }, report.skipped);
    report.ms = Math.round(performance.now() - started);
    const { table: _, ...fields } = report;
    const level = report.failed > 0 || report.skipped > 0 ? 'warn' : 'info';
    log[level]({ table, done: done(), ...fields }, 'warm-up done');
    return report;
  }
}
