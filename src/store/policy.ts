/**
 * Per-table freshness and protection policy: its JSON schema (TypeBox) with
 * each field's description, bounds and default; the TypeScript types derived
 * from it; and the resolved shape the store works with. All durations are
 * milliseconds.
 */
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { checkSync } from 'recheck';
import { ConfigError } from '../errors.js';

/**
 * The longest duration a policy field takes, ms: 2³¹ − 1 (about 24.8 days), the
 * longest a Node timer waits (a longer `setTimeout` fires after 1 ms).
 */
const MAX_MS = 2_147_483_647;

/**
 * The default of `fillEventMaxBytes`: 16 KiB. A waiter answered from the event saves one round
 * trip (tens of µs on a LAN), while every fill's event is sent to every instance subscribed to
 * the table: past a few KiB the value's copies, not the round trip, are the cost, and a burst of
 * large fills could fill a subscriber's pub/sub output buffer (Valkey's default soft limit is
 * 8 MiB for 60 s), whose disconnection flushes that instance's L1. Most rows are far smaller.
 */
const FILL_EVENT_MAX_BYTES = 16 * 1024;

/** A duration in milliseconds, 1 ms to {@link MAX_MS}. */
function ms(description: string, fallback: number) {
  return Type.Integer({ minimum: 1, maximum: MAX_MS, default: fallback, description });
}

/** JSON schema of a table's L1 bounds (in-process lru-cache): every field optional, with its default. */
export const L1PolicySchema = Type.Object(
  {
    maxEntries: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100_000_000,
        default: 10_000,
        description: 'Most rows held.',
      }),
    ),
    maxBytes: Type.Optional(
      Type.Integer({
        minimum: 1024,
        maximum: 64 * 1024 * 1024 * 1024,
        default: 64 * 1024 * 1024,
        description:
          "Most bytes of heap the L1 rows may take. A row keeps its value's JSON text only (library callers decode it on demand) and counts what it really costs: its text and id as V8 stores them (one byte per character when ASCII, else two) plus 312 bytes for the row itself (and its tags), calibrated by `npm run bench:memory`, and 192 more once a fresh hit has made its shared answer. A row larger than an eighth of this is not kept in L1 (pass-through).",
      }),
    ),
    ttlMs: Type.Optional(
      ms(
        "A row's L1 lifetime before jitter: each row lives this long lengthened by up to the table's `jitter` (at most (1 + jitter) × this), and never past its hard TTL.",
        30_000,
      ),
    ),
  },
  {
    additionalProperties: false,
    description: 'L1 bounds: the in-process cache in front of Valkey.',
  },
);

/**
 * JSON schema (ajv, strict) of a table's policy as written by a user: every field optional,
 * each with its `description`, bounds and `default` (applied by {@link resolvePolicy}, not by
 * validation). Shared by the configuration file and `createStore`. The fields are documented
 * here once; `docs/configuration.md` is generated from it.
 */
export const TablePolicySchema = Type.Object(
  {
    ttlMs: Type.Optional(
      ms('Soft TTL: after it the value is stale (served while one caller refreshes it).', 300_000),
    ),
    jitter: Type.Optional(
      Type.Number({
        minimum: 0,
        maximum: 1,
        default: 0.2,
        description:
          'Soft and hard TTL, and the L1 TTL, are multiplied by uniform(1, 1 + jitter), so keys written together do not expire together.',
      }),
    ),
    staleMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_MS,
        default: 60_000,
        description:
          'Stale window: after `ttlMs` the value is still served while one background refresh runs (stale-while-revalidate, stale-if-error). Hard TTL (Valkey `PX`) = (`ttlMs` + `staleMs`) × the same jitter factor.',
      }),
    ),
    earlyRefreshBeta: Type.Optional(
      Type.Number({
        minimum: 0,
        maximum: 100,
        default: 1,
        description: 'XFetch beta (probabilistic early refresh); 0 disables early refresh.',
      }),
    ),
    negativeTtlMs: Type.Optional(
      ms('How long "not found" is cached (negative caching), jittered.', 30_000),
    ),
    leaseMs: Type.Optional(
      ms(
        "Lease lifetime (Valkey `PX`): how long one instance holds the right to load an id for the whole fleet without renewing it. The holder renews it every third of `leaseMs` while it loads, so a slow but live loader keeps it and a dead holder's lease expires within `leaseMs` (then exactly one waiter takes over). Keep it well below `waitTimeoutMs` (a table whose is not is warned about at start: its waiters would time out before a takeover).",
        2_000,
      ),
    ),
    loadTimeoutMs: Type.Optional(
      ms(
        "A load slower than this fails every waiter with `ECC_LOAD_TIMEOUT`; the loader's `signal` is aborted.",
        4_000,
      ),
    ),
    waitTimeoutMs: Type.Optional(
      ms(
        "Longest any caller waits for an answer (then `ECC_WAIT_TIMEOUT`); also bounds waiting on another instance's lease.",
        5_000,
      ),
    ),
    fillEventMaxBytes: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 1024 * 1024,
        default: FILL_EVENT_MAX_BYTES,
        description:
          "Longest stored value (its envelope's text, bytes) a fill's event carries: instances waiting on the holder's lease answer from the event, with no second read of L2. A longer value's event carries its version only, and the waiters read it. Each fill's event goes to every instance subscribed to the table, so this bounds that fan-out. 0: events carry the version only.",
      }),
    ),
    maxConcurrentLoads: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100_000,
        default: 256,
        description:
          'Ceiling of the loader calls at once for this table, per process. The limit in force adapts below it to the source (Gradient2, see docs/operations.md, admission): it starts at `initialConcurrentLoads`, grows while loads stay as fast as usual (above `initialConcurrentLoads`: within twice the no-load latency) and at least half of it is in use, and shrinks when loads slow down or fail.',
      }),
    ),
    initialConcurrentLoads: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100_000,
        default: 16,
        description:
          'Where the adaptive load limit starts, per process: at most `maxConcurrentLoads` (more is refused; left out, 16 or `maxConcurrentLoads`, the lower). It is what a source is trusted with before it has shown how much it takes. A table that batches (`loadMany`) fills a batch only within the limit: give it at least `maxBatchSize` to fill its first batches.',
      }),
    ),
    maxQueueDelayMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_MS,
        default: 2_000,
        description:
          'Longest a load may wait for a slot. A load whose predicted wait (loads ahead ÷ limit × current load latency) plus one load exceeds 80 % of it — whose predicted wait exceeds half of it while the load limit is cut below `initialConcurrentLoads` — is shed at once with `ECC_SHED` and `Retry-After`; a queued load that has waited this long is shed too.',
      }),
    ),
    maxOverdueLoads: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 100_000,
        default: 64,
        description:
          "Loads that ran ten times the table's usual load latency (at least 100 ms) are overdue — hanging on their id — and leave the limit, so they cannot starve healthy ids: at most this many at once, per table and process; beyond it they keep their slot. An id whose load went overdue in the last 30 s is admitted only here (shed when full). So the source sees at most `maxConcurrentLoads` + this many of the table's loads at once. 0: overdue loads keep their slots (the bulkhead alone).",
      }),
    ),
    maxQueuedLoads: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 1_000_000,
        default: 10_000,
        description:
          'Most loads queued for a slot at once: a memory bound only (loads are shed by queueing delay, `maxQueueDelayMs`).',
      }),
    ),
    confirmNotFoundMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_MS,
        description:
          'A load that answers "not found" for an id that has a (stale) value replaces it only once "not found" has been answered for this long (a later refresh at least this much after the first); meanwhile the value is served stale. 0: "not found" replaces it at once (an authoritative source). Default: the source kind\'s (`http`: 5,000; SQL kinds and a `load` function: 0).',
      }),
    ),
    errorTtlMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_MS,
        default: 1_000,
        description:
          'How long a failed load (the loader threw: a SQL error, an origin 5xx) is remembered for its id, fleet-wide in Valkey, when the source said nothing of when to retry: meanwhile every caller of the id gets the same `ECC_LOAD_FAILED` with `Retry-After` (or a stale value), and the source is not asked. A row that cannot be stored (`ECC_BAD_VALUE`, `ECC_BAD_ROW_TAGS`) is remembered as long, answered with its own code. 0: not remembered. Timeouts and shed loads are never remembered.',
      }),
    ),
    maxErrorTtlMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_MS,
        default: 30_000,
        description:
          "Cap on how long a failure is remembered when the source said when to retry (an http origin's `Retry-After`, honoured up to this).",
      }),
    ),
    maxWaitersPerFlight: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000_000,
        default: 1_000_000,
        description:
          'Callers that may wait on one flight; more are shed with `ECC_SHED`. A memory bound only: a waiter costs a few hundred bytes and no timer (one per table bounds every wait), so a herd of any size that fits in memory is answered by one load. Callers of one id in the same tick share one miss message and count as one group: it waits whole or is shed whole.',
      }),
    ),
    coalescing: Type.Optional(
      Type.Unsafe<'fleet' | 'process' | 'none'>({
        enum: ['fleet', 'process', 'none'],
        default: 'fleet',
        description:
          'How far misses are coalesced: `fleet` (in-process single-flight plus the Valkey lease: one source read per burst across every instance), `process` (single-flight in this process only), or `none` (every miss loads: a baseline for drills, never for production).',
      }),
    ),
    batchWindowMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 1_000,
        default: 0,
        description:
          'Tables with `loadMany` (batched loading): how long the first miss of a batch waits for others before the batch goes to the source. 0: one turn of the event loop, which gathers the misses of one request or one Valkey reply.',
      }),
    ),
    maxBatchSize: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000,
        default: 100,
        description:
          'Tables with `loadMany`: most ids in one source call; a full batch goes at once. Each id of a batch holds its own admission slot, so a batch is also at most the adaptive limit (it starts at `initialConcurrentLoads`, at most `maxConcurrentLoads`).',
      }),
    ),
    cacheHeaders: Type.Optional(
      Type.Boolean({
        default: true,
        description:
          'HTTP answers to reads carry `Cache-Control` (`max-age`, `stale-while-revalidate`, `stale-if-error`) and `Age` (RFC 9111, RFC 5861), so a CDN or client cache in front may reuse them. `false`: neither header (`ETag` and `Cache-Status` stay). Library reads are not affected.',
      }),
    ),
    idPattern: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 1024,
        description:
          'A stricter id rule than the default: a JavaScript regular expression (flag `u`), anchored by you. Refused when it does not compile or has nested quantifiers such as `^(a+)+$` (ReDoS). Unset: only the default id rule.',
      }),
    ),
    l1: Type.Optional(L1PolicySchema),
  },
  { additionalProperties: false },
);

/**
 * A table's policy as written by a user: every field optional. Durations in milliseconds; each
 * field's meaning, bounds and default are in {@link TablePolicySchema}.
 */
export type TablePolicyInput = Static<typeof TablePolicySchema>;

/** Bounds of a table's in-process L1 (lru-cache), every default applied; see {@link L1PolicySchema}. */
export type L1Policy = Required<Static<typeof L1PolicySchema>>;

/** A table's policy with every default applied; `idPattern` compiled. */
export interface TablePolicy
  extends Required<Omit<TablePolicyInput, 'idPattern' | 'l1' | 'confirmNotFoundMs'>> {
  /** See {@link TablePolicySchema}; 0 unless the table or its source kind sets it. */
  confirmNotFoundMs: number;
  /** The compiled `idPattern` (flag `u`), or `undefined`: only the default id rule applies. */
  idPattern: RegExp | undefined;
  /** L1 bounds, every default applied. */
  l1: L1Policy;
}

/** Every policy default, read from the `default` of each field of {@link TablePolicySchema}. */
export const DEFAULT_POLICY: Omit<TablePolicy, 'idPattern'> = Object.freeze({
  ...(Value.Default(TablePolicySchema, {}) as Omit<TablePolicy, 'idPattern' | 'l1'>),
  confirmNotFoundMs: 0,
  l1: Object.freeze(Value.Default(L1PolicySchema, {}) as L1Policy),
});

/** The properties of {@link TablePolicySchema}, for a schema that extends it (`createStore` adds `load`). */
export const policySchemaProperties = TablePolicySchema.properties;

/**
 * Applies defaults. Assumes `input` already passed the schema; checks the
 * cross-field rules the schema cannot express.
 *
 * @param at - dotted path of `input` in the configuration (e.g. `tables.products`), prefixed to
 *   the field an error names. Default: none (the field alone, e.g. `leaseMs`).
 * @returns the resolved policy.
 * @throws {ConfigError} `ECC_BAD_CONFIG` whose `field` is `<at>.initialConcurrentLoads` when it
 *   exceeds `maxConcurrentLoads` (left out, it is the default or `maxConcurrentLoads`, the lower).
 * @throws {ConfigError} `ECC_BAD_CONFIG` whose `field` is `<at>.idPattern` when `idPattern` is not a valid regular
 *   expression or one the recheck ReDoS checker does not prove safe (nested quantifiers such
 *   as `^(a+)+$`, overlapping alternation such as `^(a|aa)+$`): matching an id against it
 *   could take exponential or polynomial time. The message is `<field>: <what is wrong>`.
 */
export function resolvePolicy(input: TablePolicyInput, at?: string): TablePolicy {
  const { l1, idPattern, ...rest } = input;
  const policy: TablePolicy = {
    ...DEFAULT_POLICY,
    ...rest,
    idPattern: undefined,
    l1: { ...DEFAULT_POLICY.l1, ...l1 },
  };
  const fail = (name: keyof TablePolicyInput, problem: string, cause?: unknown): never => {
    const field = at === undefined || at === '' ? name : `${at}.${name}`;
    throw new ConfigError(`${field}: ${problem}`, { field, cause });
  };
  // The limit starts at most at its ceiling: a table that lowers only the ceiling starts there.
  if (rest.initialConcurrentLoads === undefined) {
    policy.initialConcurrentLoads = Math.min(
      DEFAULT_POLICY.initialConcurrentLoads,
      policy.maxConcurrentLoads,
    );
  } else if (rest.initialConcurrentLoads > policy.maxConcurrentLoads) {
    fail(
      'initialConcurrentLoads',
      `must be at most maxConcurrentLoads (${policy.maxConcurrentLoads}), is ${rest.initialConcurrentLoads}`,
    );
  }
  if (idPattern !== undefined) {
    try {
      policy.idPattern = new RegExp(idPattern, 'u');
    } catch (err) {
      fail('idPattern', `is not a valid regular expression: ${(err as Error).message}`, err);
    }
    // recheck (Tsutsumi et al.'s ReDoS checker) decides by analysis and fuzzing; only
    // "safe" passes: "vulnerable" and "unknown" are both refused.
    const verdict = checkSync(idPattern, 'u');
    if (verdict.status !== 'safe') {
      fail(
        'idPattern',
        verdict.status === 'vulnerable'
          ? `is not a safe regular expression: matching an id can take ${verdict.complexity.type} time`
          : 'could not be proven safe against catastrophic backtracking; simplify it',
      );
    }
  }
  return policy;
}
