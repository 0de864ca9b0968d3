import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { TableStats } from './store/types.js';

/** Where an answer came from, as counted by `echostore_reads_total{layer}`. */
export type ReadLayer = 'l1' | 'l2' | 'source' | 'negative' | 'stale';

/** A table's answered reads by layer: plain integers bumped on the hot path. */
export type ReadCounts = Record<ReadLayer, number>;

/**
 * The metric children of one table, bound once at table creation so the hot
 * path pays no label lookup.
 */
export interface TableMetrics {
  fills: { inc(n?: number): void };
  coalesced: { inc(n?: number): void };
  loadSeconds: { observe(seconds: number): void };
  loadErrors(code: string): { inc(n?: number): void };
  shed: { inc(n?: number): void };
  lateLoads: { inc(n?: number): void };
  valkeyErrors(op: string): { inc(n?: number): void };
  badEnvelopes: { inc(n?: number): void };
  lease(outcome: LeaseOutcome): { inc(n?: number): void };
  waitSeconds: { observe(seconds: number): void };
  refreshes(reason: 'early' | 'stale'): { inc(n?: number): void };
  refreshFailures: { inc(n?: number): void };
  invalidations: { inc(n?: number): void };
  coherence(result: 'applied' | 'stale'): { inc(n?: number): void };
  l1Flushes: { inc(n?: number): void };
}

/** Lease outcomes counted by `echostore_lease_total{outcome}`. */
export type LeaseOutcome = 'acquired' | 'contended' | 'lost' | 'takeover';

/**
 * The store's Prometheus metrics, registered on a registry the caller passes
 * in (no global registry: two stores can live in one process).
 * Counters end in `_total`; times are seconds.
 */
export class StoreMetrics {
  readonly #fills: Counter<'table'>;
  readonly #coalesced: Counter<'table'>;
  readonly #loadSeconds: Histogram<'table'>;
  readonly #loadErrors: Counter<'table' | 'code'>;
  readonly #shed: Counter<'table'>;
  readonly #lateLoads: Counter<'table'>;
  readonly #valkeyErrors: Counter<'table' | 'op'>;
  readonly #badEnvelopes: Counter<'table'>;
  readonly #lease: Counter<'table' | 'outcome'>;
  readonly #waitSeconds: Histogram<'table'>;
  readonly #refreshes: Counter<'table' | 'reason'>;
  readonly #refreshFailures: Counter<'table'>;
  readonly #invalidations: Counter<'table'>;
  readonly #coherence: Counter<'table' | 'result'>;
  readonly #l1Flushes: Counter<'table'>;
  readonly #stats = new Map<string, () => TableStats>();
  readonly #readCounts = new Map<string, ReadCounts>();

  constructor(registry: Registry) {
    const registers = [registry];
    this.#fills = new Counter({
      name: 'echostore_fills_total',
      help: 'Loader runs (source reads started by this process).',
      labelNames: ['table'],
      registers,
    });
    this.#coalesced = new Counter({
      name: 'echostore_coalesced_total',
      help: 'Waiters that attached to a running flight instead of starting a load.',
      labelNames: ['table'],
      registers,
    });
    const readCounts = this.#readCounts;
    new Counter({
      name: 'echostore_reads_total',
      help: 'Reads answered, by the layer that answered (l1, l2, source, negative, stale).',
      labelNames: ['table', 'layer'],
      registers,
      collect() {
        this.reset();
        for (const [table, counts] of readCounts) {
          for (const layer of Object.keys(counts) as ReadLayer[])
            this.inc({ table, layer }, counts[layer]);
        }
      },
    });
    this.#loadSeconds = new Histogram({
      name: 'echostore_load_duration_seconds',
      help: 'Time the loader took, successful or not, in seconds.',
      labelNames: ['table'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.#loadErrors = new Counter({
      name: 'echostore_load_errors_total',
      help: 'Failed flights, by error code.',
      labelNames: ['table', 'code'],
      registers,
    });
    this.#shed = new Counter({
      name: 'echostore_shed_total',
      help: 'Loads refused because the table ran maxConcurrentLoads loads already.',
      labelNames: ['table'],
      registers,
    });
    this.#lateLoads = new Counter({
      name: 'echostore_late_loads_total',
      help: 'Loader results that arrived after their load timed out (discarded).',
      labelNames: ['table'],
      registers,
    });
    this.#valkeyErrors = new Counter({
      name: 'echostore_valkey_errors_total',
      help: 'Valkey commands that failed or timed out, by operation.',
      labelNames: ['table', 'op'],
      registers,
    });
    this.#badEnvelopes = new Counter({
      name: 'echostore_bad_envelopes_total',
      help: 'L2 values that could not be decoded (treated as a miss and overwritten).',
      labelNames: ['table'],
      registers,
    });
    this.#lease = new Counter({
      name: 'echostore_lease_total',
      help: 'Fleet lease outcomes: acquired (this flight loads), contended (another instance loads), lost (the fill was refused: lease expired or invalidated), takeover (acquired after waiting on a holder that did not fill).',
      labelNames: ['table', 'outcome'],
      registers,
    });
    this.#waitSeconds = new Histogram({
      name: 'echostore_lease_wait_seconds',
      help: "Time a contended flight waited for another instance's fill (or a takeover), in seconds.",
      labelNames: ['table'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.#refreshes = new Counter({
      name: 'echostore_refreshes_total',
      help: 'Background refreshes started: early (XFetch) or stale (a stale value was served).',
      labelNames: ['table', 'reason'],
      registers,
    });
    this.#refreshFailures = new Counter({
      name: 'echostore_refresh_failures_total',
      help: 'Background refreshes that failed (stale-if-error keeps serving; the id backs off).',
      labelNames: ['table'],
      registers,
    });
    this.#invalidations = new Counter({
      name: 'echostore_invalidations_total',
      help: 'DELETEs (invalidations) accepted by Valkey.',
      labelNames: ['table'],
      registers,
    });
    this.#coherence = new Counter({
      name: 'echostore_coherence_total',
      help: "Coherence messages about an id this instance holds in L1: applied (newer: row dropped) or stale (not newer, e.g. this instance's own echo: ignored).",
      labelNames: ['table', 'result'],
      registers,
    });
    this.#l1Flushes = new Counter({
      name: 'echostore_l1_flushes_total',
      help: 'Whole-L1 flushes after the event subscriber reconnected (messages may have been missed).',
      labelNames: ['table'],
      registers,
    });
    const stats = this.#stats;
    const gauge = (name: string, help: string, pick: (s: TableStats) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['table'],
        registers,
        collect() {
          this.reset();
          for (const [table, read] of stats) this.set({ table }, pick(read()));
        },
      });
    gauge('echostore_flights', 'Flights (loads or L2 reads) in progress.', (s) => s.flights);
    gauge(
      'echostore_mailbox_depth',
      "Messages waiting in the table owner's mailbox.",
      (s) => s.mailbox_depth,
    );
    gauge('echostore_l1_entries', 'Rows in the in-process L1.', (s) => s.l1_entries);
    gauge('echostore_l1_bytes', 'Bytes held by the in-process L1.', (s) => s.l1_bytes);
    gauge('echostore_loads_active', 'Loader calls running now.', (s) => s.loads_active);
    gauge(
      'echostore_loads_queued',
      'Loads waiting for a maxConcurrentLoads slot.',
      (s) => s.loads_queued,
    );
    const degraded = this.#degraded;
    new Gauge({
      name: 'echostore_valkey_degraded',
      help: '1 while Valkey is unusable (disconnected, or commands timing out) and the store runs degraded.',
      registers,
      collect() {
        this.set(degraded.check() ? 1 : 0);
      },
    });
  }

  readonly #degraded = { check: (): boolean => false };

  /** Reports `isDegraded()` as `echostore_valkey_degraded`. */
  watchDegraded(isDegraded: () => boolean): void {
    this.#degraded.check = isDegraded;
  }

  /**
   * Binds the children of one table. `stats` and `reads` are read at scrape
   * time: the gauges and `echostore_reads_total` mirror the table's own plain
   * counters, so an L1 hit costs one integer increment, not a label lookup.
   */
  forTable(table: string, stats: () => TableStats, reads: ReadCounts): TableMetrics {
    this.#stats.set(table, stats);
    this.#readCounts.set(table, reads);
    // Start every per-table counter at 0, so a series exists from the first scrape.
    const plain = [
      this.#fills,
      this.#coalesced,
      this.#shed,
      this.#lateLoads,
      this.#badEnvelopes,
      this.#refreshFailures,
      this.#invalidations,
      this.#l1Flushes,
    ];
    for (const c of plain) c.labels(table).inc(0);
    for (const reason of ['early', 'stale'] as const) this.#refreshes.labels(table, reason).inc(0);
    for (const result of ['applied', 'stale'] as const)
      this.#coherence.labels(table, result).inc(0);
    for (const outcome of ['acquired', 'contended', 'lost', 'takeover'] as const)
      this.#lease.labels(table, outcome).inc(0);
    return {
      fills: this.#fills.labels(table),
      coalesced: this.#coalesced.labels(table),
      loadSeconds: this.#loadSeconds.labels(table),
      loadErrors: (code) => this.#loadErrors.labels(table, code),
      shed: this.#shed.labels(table),
      lateLoads: this.#lateLoads.labels(table),
      valkeyErrors: (op) => this.#valkeyErrors.labels(table, op),
      badEnvelopes: this.#badEnvelopes.labels(table),
      lease: (outcome) => this.#lease.labels(table, outcome),
      waitSeconds: this.#waitSeconds.labels(table),
      refreshes: (reason) => this.#refreshes.labels(table, reason),
      refreshFailures: this.#refreshFailures.labels(table),
      invalidations: this.#invalidations.labels(table),
      coherence: (result) => this.#coherence.labels(table, result),
      l1Flushes: this.#l1Flushes.labels(table),
    };
  }
}
