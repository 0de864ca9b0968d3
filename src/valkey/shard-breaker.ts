/**
 * One circuit breaker per cluster primary, so that a dead shard costs only
 * the keys it serves: their commands fail fast (misses go to the source,
 * writes answer `ECC_VALKEY_UNAVAILABLE`) while every other shard's commands
 * go on as before.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { Breaker, type BreakerOptions, type DegradedReason, type RunOptions } from './breaker.js';
import { isCluster, primaryOf, slotOwners } from './slots.js';

/**
 * What a table's Valkey commands go through: the store's one {@link Breaker}
 * for a single server (or a Sentinel-managed primary), {@link ShardBreakers}
 * for a cluster. `key` is the command's first key: it picks the shard.
 */
export interface Breakers {
  run<T>(op: () => Promise<T>, options?: RunOptions): Promise<T>;
  /** True while some command would be refused or fail (some shard is unusable). */
  readonly degraded: boolean;
  /** Why (the first unusable shard's reason); undefined while nothing is degraded. */
  readonly reason: DegradedReason | undefined;
  close(): void;
}

/**
 * The breakers for `client`: one per primary for a cluster, one for
 * anything else. The store's own health probe (`options.probe`, a write to one
 * key) guards one breaker only: on a cluster the shards' breakers are probed by
 * the commands themselves.
 */
export function breakersFor(
  client: Redis | Cluster,
  log: Logger,
  options: BreakerOptions = {},
): Breakers {
  if (!isCluster(client)) return new Breaker(client, log, options);
  const { probe: _probe, ...perShard } = options;
  return new ShardBreakers(client, log, perShard);
}

/** The breaker of commands whose slot has no primary in the slot map (or that have no key). */
const UNMAPPED = 'unmapped';

/**
 * A {@link Breaker} per primary (`host:port`), chosen per command by the slot
 * of its key in the client's current slot map. When a primary dies its
 * breaker opens after 3 failed commands and the shard's keys are answered
 * without L2; when its replica is promoted, the slot map names the new
 * primary, whose breaker is closed: fills resume at once. Commands for slots
 * the map leaves without a primary (the server stops listing a failed
 * primary's slots once it is marked failed), or without a key, share one more
 * breaker.
 */
export class ShardBreakers implements Breakers {
  readonly #cluster: Cluster;
  readonly #log: Logger;
  readonly #options: BreakerOptions | undefined;
  readonly #byPrimary = new Map<string, Breaker>();

  constructor(cluster: Cluster, log: Logger, options?: BreakerOptions) {
    this.#cluster = cluster;
    this.#log = log;
    this.#options = options;
  }

  /**
   * Runs `op` through the breaker of the primary serving `key`.
   *
   * @throws what {@link Breaker.run} throws.
   */
  run<T>(op: () => Promise<T>, options: RunOptions = {}): Promise<T> {
    const { key } = options;
    const primary = key === undefined ? undefined : primaryOf(this.#cluster, key);
    return this.#breaker(primary ?? UNMAPPED)
      .run(op, options)
      .catch((err: unknown) => {
        // Every script keeps to one slot (see valueKey): a cross-slot reply is a bug, never an answer.
        if (err instanceof Error && err.message.includes('CROSSSLOT')) {
          this.#log.error({ err, key }, 'bug: a Valkey command spanned two cluster slots');
        }
        throw err;
      });
  }

  /** True while {@link reason} names one. */
  get degraded(): boolean {
    return this.reason !== undefined;
  }

  /**
   * `disconnected` while the cluster client is not ready; else the reason of
   * the first open breaker (in the order the primaries were first used) of a
   * primary in the current slot map, or of the unmapped slots while there are
   * any; else undefined. Breakers that no longer guard anything (a failed
   * primary after its replica took over) are dropped.
   */
  get reason(): DegradedReason | undefined {
    if (this.#cluster.status !== 'ready') return 'disconnected';
    const { primaries, unmapped } = slotOwners(this.#cluster);
    let reason: DegradedReason | undefined;
    for (const [primary, breaker] of this.#byPrimary) {
      if (primary === UNMAPPED ? unmapped === 0 : !primaries.has(primary)) {
        breaker.close();
        this.#byPrimary.delete(primary);
      } else {
        reason ??= breaker.reason;
      }
    }
    return reason;
  }

  close(): void {
    for (const breaker of this.#byPrimary.values()) breaker.close();
    this.#byPrimary.clear();
  }

  #breaker(primary: string): Breaker {
    let breaker = this.#byPrimary.get(primary);
    if (breaker === undefined) {
      breaker = new Breaker(this.#cluster, this.#log.child({ shard: primary }), this.#options);
      this.#byPrimary.set(primary, breaker);
    }
    return breaker;
  }
}
