/**
 * The settings of the service instances in the drills that break Valkey under
 * load (faults, failover, reshard): commands that fail fast, rows that stay in
 * L1 for the whole drill, the longest a request may lawfully take under them,
 * and the two instances on one origin those drills start.
 */
import { type Origin, startOrigin } from '../../harness/origin.js';
import { type Service, startServices } from '../../harness/service.js';
import type { Reaper } from './reaper.js';
import { originConfig } from './store.js';

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
  initialConcurrentLoads: 64,
};

/** The longest a request may lawfully take: wait, then load, then one timed-out command, plus 1 s margin. */
export const FAULT_BOUND_MS =
  FAULT_POLICY.waitTimeoutMs + FAULT_POLICY.loadTimeoutMs + FAULT_VALKEY.commandTimeoutMs + 1_000;

/** Two instances of one table on one origin ({@link startFaultPair}). */
export interface FaultPair {
  origin: Origin;
  services: Service[];
  /** The instances' base URLs. */
  targets: string[];
  /** The config file both instances run on. */
  config: object;
  /** Stops the instances (SIGKILL after 5 s), then the origin. */
  stop(): Promise<void>;
}

/**
 * Starts an origin answering after `latencyMs` and two instances of `table`
 * on it (a 3 s grace on a failed start), over `valkey` (a `valkey` section;
 * {@link FAULT_VALKEY} added) with `policy`; `reaper` kills them if the drill dies.
 */
export async function startFaultPair(
  reaper: Reaper,
  valkey: Record<string, unknown>,
  table: string,
  latencyMs: number,
  policy: object = FAULT_POLICY,
): Promise<FaultPair> {
  const origin = await startOrigin(latencyMs);
  const config = originConfig({ ...valkey, ...FAULT_VALKEY }, table, origin.template, policy);
  const services = await startServices(2, config, (c) => reaper.track(c), 3_000).catch(
    async (err: unknown) => {
      await origin.close();
      throw err;
    },
  );
  return {
    origin,
    services,
    targets: services.map((s) => s.url),
    config,
    async stop() {
      await Promise.all(services.map((s) => s.stop(5_000)));
      await origin.close();
    },
  };
}
