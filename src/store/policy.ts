/**
 * Per-table freshness and protection policy: defaults, JSON schema, and the
 * resolved shape the store works with. All durations are milliseconds.
 */
import safeRegex from 'safe-regex2';
import { ConfigError } from '../errors.js';

/** Bounds of a table's in-process L1 (lru-cache). */
export interface L1Policy {
  /** Most rows held. Default 10,000. */
  maxEntries: number;
  /** Most bytes held (UTF-8 length of each value's JSON). A row larger than an eighth of this is not kept in L1 (pass-through). Default 64 MiB. */
  maxBytes: number;
  /** Upper bound on a row's L1 lifetime, before jitter; a row never outlives its soft TTL either. Default 30,000 ms. */
  ttlMs: number;
}

/** A table's policy as written by a user: every field optional. */
export interface TablePolicyInput {
  /** Soft TTL: after it the value is stale. Default 300,000. */
  ttlMs?: number;
  /** Soft and hard TTL are multiplied by uniform(1, 1 + jitter). Default 0.2. */
  jitter?: number;
  /** Extra time a stale value may still be held (hard TTL = ttlMs + staleMs). Default 60,000. */
  staleMs?: number;
  /** XFetch beta; 0 disables early refresh. Default 1. */
  earlyRefreshBeta?: number;
  /** How long "not found" is cached (negative caching). Default 30,000. */
  negativeTtlMs?: number;
  /** Lease PX; must exceed `loadTimeoutMs`. Default 5,000. */
  leaseMs?: number;
  /** A load slower than this fails its waiters with `ECC_LOAD_TIMEOUT`. Default 4,000. */
  loadTimeoutMs?: number;
  /** How long a waiter waits for someone else's fill. Default 5,000. */
  waitTimeoutMs?: number;
  /** Loader calls at once for this table, per process; more are shed with `ECC_SHED`. Default 16. */
  maxConcurrentLoads?: number;
  /** Loads that may wait for a free slot when `maxConcurrentLoads` run; more are shed with `ECC_SHED`. A queued load waits at most `leaseMs − loadTimeoutMs`. Default 64. */
  maxQueuedLoads?: number;
  /** Callers that may wait on one flight; more are shed with `ECC_SHED`. Default 10,000. */
  maxWaitersPerFlight?: number;
  /**
   * How far misses are coalesced: `fleet` (in-process single-flight plus the
   * Valkey lease: one source read per burst across every instance), `process`
   * (single-flight in this process only), or `none` (every miss loads: a
   * baseline for drills, never for production). Default `fleet`.
   */
  coalescing?: 'fleet' | 'process' | 'none';
  /** A stricter id rule than the default (a JavaScript regular expression source, anchored by you). */
  idPattern?: string;
  /** L1 bounds. */
  l1?: Partial<L1Policy>;
}

/** A table's policy with every default applied. */
export interface TablePolicy extends Required<Omit<TablePolicyInput, 'idPattern' | 'l1'>> {
  idPattern: RegExp | undefined;
  l1: L1Policy;
}

/** The defaults of DESIGN.md. */
export const DEFAULT_POLICY: Omit<TablePolicy, 'idPattern'> = Object.freeze({
  ttlMs: 300_000,
  jitter: 0.2,
  staleMs: 60_000,
  earlyRefreshBeta: 1,
  negativeTtlMs: 30_000,
  leaseMs: 5_000,
  loadTimeoutMs: 4_000,
  waitTimeoutMs: 5_000,
  maxConcurrentLoads: 16,
  maxQueuedLoads: 64,
  maxWaitersPerFlight: 10_000,
  coalescing: 'fleet',
  l1: Object.freeze({ maxEntries: 10_000, maxBytes: 64 * 1024 * 1024, ttlMs: 30_000 }),
});

const ms = { type: 'integer', minimum: 1, maximum: 31 * 24 * 3600 * 1000 } as const;

/** JSON schema (ajv) of {@link TablePolicyInput}; shared by the config file and `createStore`. */
export const policySchemaProperties = {
  ttlMs: ms,
  jitter: { type: 'number', minimum: 0, maximum: 1 },
  staleMs: { type: 'integer', minimum: 0, maximum: 31 * 24 * 3600 * 1000 },
  earlyRefreshBeta: { type: 'number', minimum: 0, maximum: 100 },
  negativeTtlMs: ms,
  leaseMs: ms,
  loadTimeoutMs: ms,
  waitTimeoutMs: ms,
  maxConcurrentLoads: { type: 'integer', minimum: 1, maximum: 100_000 },
  maxQueuedLoads: { type: 'integer', minimum: 0, maximum: 1_000_000 },
  maxWaitersPerFlight: { type: 'integer', minimum: 1, maximum: 10_000_000 },
  coalescing: { enum: ['fleet', 'process', 'none'] },
  idPattern: { type: 'string', minLength: 1, maxLength: 1024 },
  l1: {
    type: 'object',
    additionalProperties: false,
    properties: {
      maxEntries: { type: 'integer', minimum: 1, maximum: 100_000_000 },
      maxBytes: { type: 'integer', minimum: 1024, maximum: 64 * 1024 * 1024 * 1024 },
      ttlMs: ms,
    },
  },
} as const;

/**
 * Applies defaults. Assumes `input` already passed the schema; checks the
 * cross-field rules the schema cannot express.
 *
 * @param at - dotted path of `input` in the configuration (e.g. `tables.products`), prefixed to
 *   the field an error names. Default: none (the field alone, e.g. `leaseMs`).
 * @returns the resolved policy.
 * @throws {ConfigError} `ECC_BAD_CONFIG` whose `field` is `<at>.leaseMs` when
 *   `leaseMs <= loadTimeoutMs`, or `<at>.idPattern` when `idPattern` is not a valid regular
 *   expression or is one safe-regex2 flags (star height above 1, i.e. nested quantifiers such
 *   as `^(a+)+$`, or more than 25 quantifiers): matching an id against it could take
 *   exponential time (ReDoS). The message is `<field>: <what is wrong>`.
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
  if (policy.leaseMs <= policy.loadTimeoutMs) {
    fail(
      'leaseMs',
      `must be greater than loadTimeoutMs (${policy.loadTimeoutMs}); it is ${policy.leaseMs}`,
    );
  }
  if (idPattern !== undefined) {
    try {
      policy.idPattern = new RegExp(idPattern, 'u');
    } catch (err) {
      fail('idPattern', `is not a valid regular expression: ${(err as Error).message}`, err);
    }
    if (!safeRegex(idPattern)) {
      fail(
        'idPattern',
        'is not a safe regular expression (nested quantifiers can take exponential time)',
      );
    }
  }
  return policy;
}
