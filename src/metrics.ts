import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { TableStats } from './store/types.js';
import { DEGRADED_REASONS } from './valkey/breaker.js';
import { REDIRECT_KINDS, type RedirectKind } from './valkey/redirects.js';

/** Where an answer came from, as counted by `echostore_reads_total{layer}`. */
export type ReadCountLayer = 'l1' | 'l2' | 'origin' | 'negative' | 'stale';

/** Lease outcomes counted by `echostore_lease_total{outcome}`. */
export type LeaseOutcome =
  | 'acquired'
  | 'contended'
  | 'woken'
  | 'lost'
  | 'takeover'
  | 'renewed'
  | 'expired';

/**
 * One table's counters, EchoStore's counter array: plain integers bumped
 * where the event happens (an L1 hit costs one increment, no label lookup),
 * read by `Table.stats()` and mirrored into Prometheus at scrape time by
 * {@link StoreMetrics}, so the two can never disagree. Monotonic since start.
 */
export interface TableCounters {
  /** Reads answered from L1 in the caller. */
  hits: number;
  /** Reads that went to the owner. */
  misses: number;
  /** Loader calls (source reads started by this process); counted once, where the loader is called. */
  loads: number;
  /** `loadMany` calls (batched loading): each carries the `loads` of its ids to the source as one read. */
  batches: number;
  /** Flights answered by Valkey (L2). */
  l2_hits: number;
  /** Callers that coalesced onto a running flight or an open miss message. */
  coalesced: number;
  /** Answered reads by the layer that answered. */
  reads: Record<ReadCountLayer, number>;
  /** Fleet lease outcomes. */
  lease: Record<LeaseOutcome, number>;
  /** Loads refused (`ECC_SHED`). */
  shed: number;
  /** Loader results that arrived after their load timed out (discarded). */
  lateLoads: number;
  /** Flights answered with a remembered load failure (or stale) instead of asking the source. */
  rememberedFailures: number;
  /** Loads whose "not found" did not replace the id's value: not yet confirmed (`confirmNotFoundMs`). */
  unconfirmedNotFound: number;
  /** L2 values that could not be decoded (a miss, overwritten). */
  badEnvelopes: number;
  /** Background refreshes started, by reason. */
  refreshes: { early: number; stale: number; revalidate: number; purge: number };
  /** Background refreshes that failed. */
  refreshFailures: number;
  /** DELETEs accepted by Valkey. */
  invalidations: number;
  /** Purges accepted by Valkey from this instance, by kind (`hard`, `soft`) and scope (`tags`, `table`). */
  purges: Record<'hard_tags' | 'hard_table' | 'soft_tags' | 'soft_table', number>;
  /** L1 rows found purged when read: hard (dropped), soft (served stale, a refresh asked). */
  purgedRows: { hard: number; soft: number };
  /** L2 rows another source wrote under this table's name (another fingerprint): misses, never served. */
  foreignRows: number;
  /** DELETEs that deleted the value instead of writing a tombstone (Valkey was out of memory). */
  tombstoneFallbacks: number;
  /** Coherence messages about a row this instance holds: applied (dropped) or stale (ignored). */
  coherence: { applied: number; stale: number };
  /** Whole-L1 flushes after the subscriber reconnected. */
  l1Flushes: number;
  /** Failed flights, by error code. */
  loadErrors: Record<string, number>;
  /** Valkey commands that failed or timed out, by operation. */
  valkeyErrors: Record<string, number>;
  /** Writes answered `ECC_VALKEY_UNAVAILABLE` without being sent (degraded: the breaker is open). */
  writesRefused: { put: number; del: number };
  /** Two-key scripts answered `TRYAGAIN` (their slot in migration) and re-run key by key, by operation. */
  valkeyRetries: Record<string, number>;
}

/** A table's counters, all zero. */
export function newCounters(): TableCounters {
  return {
    hits: 0,
    misses: 0,
    loads: 0,
    batches: 0,
    l2_hits: 0,
    coalesced: 0,
    reads: { l1: 0, l2: 0, origin: 0, negative: 0, stale: 0 },
    lease: { acquired: 0, contended: 0, woken: 0, lost: 0, takeover: 0, renewed: 0, expired: 0 },
    shed: 0,
    lateLoads: 0,
    rememberedFailures: 0,
    unconfirmedNotFound: 0,
    badEnvelopes: 0,
    refreshes: { early: 0, stale: 0, revalidate: 0, purge: 0 },
    refreshFailures: 0,
    invalidations: 0,
    purges: { hard_tags: 0, hard_table: 0, soft_tags: 0, soft_table: 0 },
    purgedRows: { hard: 0, soft: 0 },
    foreignRows: 0,
    tombstoneFallbacks: 0,
    coherence: { applied: 0, stale: 0 },
    l1Flushes: 0,
    loadErrors: {},
    valkeyErrors: {},
    writesRefused: { put: 0, del: 0 },
    valkeyRetries: {},
  };
}

/** Adds one to `counts[key]` (a labelled counter such as `valkeyErrors` or `loadErrors`). */
export function bump(counts: Record<string, number>, key: string): void {
  counts[key] = (counts[key] ?? 0) + 1;
}

/** The histograms of one table, bound once so the hot path pays no label lookup. */
export interface TableHistograms {
  loadSeconds: { observe(seconds: number): void };
  waitSeconds: { observe(seconds: number): void };
}

/** How one Prometheus counter mirrors a table's counters: a number, or numbers by `label`. */
interface Mirror {
  name: string;
  help: string;
  label?: string;
  /**
   * Label values exported at 0 before their first event, so that `rate()`
   * and `increase()` see the first one (a series that appears holding 1 has
   * no earlier sample to rise from).
   */
  known?: readonly string[];
  pick(c: TableCounters): number | Record<string, number>;
}

/** The codes a flight fails with (`echostore_load_errors_total{code}`). */
export const LOAD_ERROR_CODES = [
  'ECC_LOAD_FAILED',
  'ECC_LOAD_TIMEOUT',
  'ECC_BAD_VALUE',
  'ECC_WAIT_TIMEOUT',
  'ECC_SHED',
] as const;

/** The operations whose scripts run again key by key on `TRYAGAIN` (`echostore_valkey_retries_total{op}`). */
export const RETRIED_OPS = ['get', 'lease', 'fill', 'put', 'del', 'forget'] as const;

/** The writes refused while degraded (`echostore_writes_refused_total{op}`). */
export const REFUSED_WRITES = ['put', 'del'] as const;

/** The Valkey operations whose failures are counted (`echostore_valkey_errors_total{op}`). */
export const VALKEY_OPS = [
  'get',
  'lease',
  'renew',
  'fill',
  'set',
  'release',
  'publish',
  'put',
  'del',
] as const;

const MIRRORS: Mirror[] = [
  {
    name: 'echostore_loads_total',
    help: 'Loader calls (source reads started by this process).',
    pick: (c) => c.loads,
  },
  {
    // Kept until dashboards and alerts outside deploy/ move (CHANGELOG.md, 0.2.0).
    name: 'echostore_fills_total',
    help: 'Deprecated: the same count as echostore_loads_total, under its old name.',
    pick: (c) => c.loads,
  },
  {
    name: 'echostore_load_batches_total',
    help: 'loadMany calls: source reads that each loaded a batch of ids (tables with loadMany only).',
    pick: (c) => c.batches,
  },
  {
    name: 'echostore_coalesced_total',
    help: 'Callers that coalesced onto a running flight instead of starting a load.',
    pick: (c) => c.coalesced,
  },
  {
    name: 'echostore_reads_total',
    help: 'Reads answered, by the layer that answered (l1, l2, origin, negative, stale).',
    label: 'layer',
    pick: (c) => c.reads,
  },
  {
    name: 'echostore_lease_total',
    help: 'Fleet lease outcomes: acquired (this flight loads), contended (another instance loads), woken (a contended flight answered from the fill event of the holder, with no second read), lost (the fill was refused: lease expired or invalidated), takeover (acquired after the holder lease ran out unrenewed: it died or hung; a lease released after a failed load counts as acquired), renewed (the holder extended its lease while loading), expired (a renewal found the lease gone: the load is fenced).',
    label: 'outcome',
    pick: (c) => c.lease,
  },
  {
    name: 'echostore_shed_total',
    help: 'Loads or callers refused with ECC_SHED: the load queue was full, a queued load waited too long, or maxWaitersPerFlight callers already waited.',
    pick: (c) => c.shed,
  },
  {
    name: 'echostore_late_loads_total',
    help: 'Loader results that arrived after their load timed out (discarded).',
    pick: (c) => c.lateLoads,
  },
  {
    name: 'echostore_remembered_failures_total',
    help: 'Flights answered with a remembered load failure of their id (ECC_LOAD_FAILED with Retry-After, or a stale value) instead of asking the source (errorTtlMs, Retry-After).',
    pick: (c) => c.rememberedFailures,
  },
  {
    name: 'echostore_unconfirmed_not_found_total',
    help: 'Loads that answered "not found" for an id with a value and did not replace it: not yet confirmed for confirmNotFoundMs (the value is served stale meanwhile).',
    pick: (c) => c.unconfirmedNotFound,
  },
  {
    name: 'echostore_bad_envelopes_total',
    help: 'L2 values that could not be decoded (treated as a miss and overwritten).',
    pick: (c) => c.badEnvelopes,
  },
  {
    name: 'echostore_refreshes_total',
    help: 'Background refreshes started: early (XFetch), stale (a stale value was served), revalidate (a row loaded while Valkey was unusable, read once it is usable again), or purge (a soft-purged value was served).',
    label: 'reason',
    pick: (c) => c.refreshes,
  },
  {
    name: 'echostore_refresh_failures_total',
    help: 'Background refreshes that failed (stale-if-error keeps serving; the id backs off).',
    pick: (c) => c.refreshFailures,
  },
  {
    name: 'echostore_invalidations_total',
    help: 'DELETEs (invalidations) accepted by Valkey.',
    pick: (c) => c.invalidations,
  },
  {
    name: 'echostore_purges_total',
    help: 'Purges accepted by Valkey from this instance, by kind: hard_tags, hard_table, soft_tags, soft_table.',
    label: 'kind',
    pick: (c) => c.purges,
  },
  {
    name: 'echostore_purged_rows_total',
    help: 'L1 rows found purged when read: hard (dropped from L1; the read loads it) or soft (served stale while one refresh was asked).',
    label: 'kind',
    pick: (c) => c.purgedRows,
  },
  {
    name: 'echostore_foreign_rows_total',
    help: "L2 rows written under this table's name by another source (another fingerprint): each a miss, never served.",
    pick: (c) => c.foreignRows,
  },
  {
    name: 'echostore_tombstone_fallbacks_total',
    help: 'DELETEs that deleted the value and the lease instead of writing a tombstone, because Valkey was out of memory (OOM).',
    pick: (c) => c.tombstoneFallbacks,
  },
  {
    name: 'echostore_coherence_total',
    help: "Coherence messages about an id this instance holds in L1: applied (newer: row dropped) or stale (not newer, e.g. this instance's own echo: ignored).",
    label: 'result',
    pick: (c) => c.coherence,
  },
  {
    name: 'echostore_l1_flushes_total',
    help: 'Whole-L1 flushes after the event subscriber reconnected (messages may have been missed).',
    pick: (c) => c.l1Flushes,
  },
  {
    name: 'echostore_load_errors_total',
    help: 'Failed flights, by error code.',
    label: 'code',
    known: LOAD_ERROR_CODES,
    pick: (c) => c.loadErrors,
  },
  {
    name: 'echostore_valkey_errors_total',
    help: 'Valkey commands that failed or timed out, by operation.',
    label: 'op',
    known: VALKEY_OPS,
    pick: (c) => c.valkeyErrors,
  },
  {
    name: 'echostore_writes_refused_total',
    help: 'PUTs and DELETEs answered ECC_VALKEY_UNAVAILABLE without being sent: the store ran degraded (its breaker open), so nothing reached Valkey and nothing was counted as a Valkey error.',
    label: 'op',
    known: REFUSED_WRITES,
    pick: (c) => c.writesRefused,
  },
  {
    name: 'echostore_valkey_retries_total',
    help: 'Scripts with several keys answered TRYAGAIN (their cluster slot was being migrated) and run again key by key, by operation (get, lease, fill, put, del, forget).',
    label: 'op',
    known: RETRIED_OPS,
    pick: (c) => c.valkeyRetries,
  },
];

/** The gauges read from `Table.stats()` at scrape time. */
const GAUGES: Array<{ name: string; help: string; pick(s: TableStats): number }> = [
  {
    name: 'echostore_flights',
    help: 'Flights (loads or L2 reads) in progress.',
    pick: (s) => s.flights,
  },
  {
    name: 'echostore_mailbox_depth',
    help: "Messages waiting in the table owner's mailbox.",
    pick: (s) => s.mailbox_depth,
  },
  { name: 'echostore_l1_entries', help: 'Rows in the in-process L1.', pick: (s) => s.l1_entries },
  { name: 'echostore_l1_bytes', help: 'Bytes held by the in-process L1.', pick: (s) => s.l1_bytes },
  {
    name: 'echostore_loads_active',
    help: 'Loader calls running now, timed-out ones that have not settled included.',
    pick: (s) => s.loads_active,
  },
  {
    name: 'echostore_loads_queued',
    help: 'Loads waiting for a slot under the load limit.',
    pick: (s) => s.loads_queued,
  },
  {
    name: 'echostore_load_limit',
    help: 'Loader calls allowed at once now: the adaptive limit (1 to maxConcurrentLoads, initialConcurrentLoads at first), higher while the source keeps up with bursts, lower while it is slow or failing.',
    pick: (s) => s.load_limit,
  },
  {
    name: 'echostore_load_queue_delay_seconds',
    help: 'How long the oldest queued load has waited, in seconds (0 when none waits).',
    pick: (s) => s.queue_delay_ms / 1000,
  },
];

/**
 * The store's Prometheus metrics, registered on a registry the caller passes
 * in (no global registry: two stores can live in one process). Counters and
 * gauges mirror each table's {@link TableCounters} and stats at scrape time;
 * only the histograms are observed as events happen. Counters end in
 * `_total`; times are seconds.
 */
export class StoreMetrics {
  readonly #tables = new Map<string, { counters: TableCounters; stats: () => TableStats }>();
  readonly #loadSeconds: Histogram<'table'>;
  readonly #waitSeconds: Histogram<'table'>;
  #degraded: () => string | undefined = () => undefined;
  /** Cluster redirects seen by the store's client, by kind (see `watchRedirects`). */
  readonly redirects: Record<RedirectKind, number> = { moved: 0, ask: 0, tryagain: 0 };

  constructor(registry: Registry) {
    const registers = [registry];
    const tables = this.#tables;
    for (const m of MIRRORS) {
      new Counter({
        name: m.name,
        help: m.help,
        labelNames: m.label === undefined ? ['table'] : ['table', m.label],
        registers,
        collect() {
          this.reset();
          for (const [table, { counters }] of tables) {
            const value = m.pick(counters);
            if (typeof value === 'number') this.inc({ table }, value);
            else {
              const label = m.label as string;
              for (const k of m.known ?? []) if (!(k in value)) this.inc({ table, [label]: k }, 0);
              for (const [k, n] of Object.entries(value)) this.inc({ table, [label]: k }, n);
            }
          }
        },
      });
    }
    for (const g of GAUGES) {
      new Gauge({
        name: g.name,
        help: g.help,
        labelNames: ['table'],
        registers,
        collect() {
          this.reset();
          for (const [table, { stats }] of tables) this.set({ table }, g.pick(stats()));
        },
      });
    }
    const degraded = () => this.#degraded();
    new Gauge({
      name: 'echostore_valkey_degraded',
      help: 'One series per reason; 1 for the reason the store runs degraded now (disconnected, unreachable, or the refusal: oom, readonly, noperm, …), else 0. Their sum is 1 while degraded.',
      labelNames: ['reason'],
      registers,
      collect() {
        const now = degraded();
        for (const reason of DEGRADED_REASONS) this.set({ reason }, reason === now ? 1 : 0);
        // No longer a reason (a slot in migration does not degrade); kept at 0 until 0.3.0 (CHANGELOG.md).
        this.set({ reason: 'tryagain' }, 0);
      },
    });
    const redirects = this.redirects;
    new Counter({
      name: 'echostore_valkey_redirects_total',
      help: "Cluster redirects answered to the store's commands, by kind: moved (the slot has a new owner), ask (the slot is being migrated; the key is on the importing node), tryagain (the slot is being migrated and a two-key script's keys are split: it runs again key by key).",
      labelNames: ['kind'],
      registers,
      collect() {
        this.reset();
        for (const kind of REDIRECT_KINDS) this.inc({ kind }, redirects[kind]);
      },
    });
    // Fine between 0.1 and 1 s, where origins live: a 0.5 s origin reads as p99 ≈ 0.6 s, not 0.94.
    const buckets = [
      0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1, 1.5, 2.5,
      5, 10,
    ];
    this.#loadSeconds = new Histogram({
      name: 'echostore_load_duration_seconds',
      help: 'Time the loader took, successful or not, in seconds.',
      labelNames: ['table'],
      buckets,
      registers,
    });
    this.#waitSeconds = new Histogram({
      name: 'echostore_lease_wait_seconds',
      help: "Time a contended flight waited for another instance's fill (or a takeover), in seconds.",
      labelNames: ['table'],
      buckets,
      registers,
    });
  }

  /** Reports `reason()` (undefined: not degraded) as `echostore_valkey_degraded{reason}`. */
  watchDegraded(reason: () => string | undefined): void {
    this.#degraded = reason;
  }

  /**
   * Adds a table: its counters and stats are read at every scrape.
   *
   * @returns the table's bound histograms.
   */
  forTable(table: string, counters: TableCounters, stats: () => TableStats): TableHistograms {
    this.#tables.set(table, { counters, stats });
    return {
      loadSeconds: this.#loadSeconds.labels(table),
      waitSeconds: this.#waitSeconds.labels(table),
    };
  }
}
