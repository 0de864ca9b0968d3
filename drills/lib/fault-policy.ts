/**
 * The settings of the service instances in the drills that break Valkey under
 * load (faults, failover): commands that fail fast, rows that stay in L1 for
 * the whole drill, and the longest a request may lawfully take under them.
 */

/** `valkey.*` of every instance: a paused or dead server costs a command 500 ms at most. */
export const FAULT_VALKEY = { commandTimeoutMs: 500, connectTimeoutMs: 1_000 };

/** The table's policy: L1 keeps the hot ids through the drill; loads, leases and waits bounded. */
export const FAULT_POLICY = {
  ttlMs: 600_000,
  l1: { ttlMs: 600_000 },
  loadTimeoutMs: 2_000,
  leaseMs: 3_000,
  waitTimeoutMs: 4_000,
  maxConcurrentLoads: 64,
};

/** The longest a request may lawfully take: wait, then load, then one timed-out command, plus 1 s margin. */
export const FAULT_BOUND_MS =
  FAULT_POLICY.waitTimeoutMs + FAULT_POLICY.loadTimeoutMs + FAULT_VALKEY.commandTimeoutMs + 1_000;
