/**
 * One circuit breaker per cluster primary, so that a dead shard costs only
 * the keys it serves: their commands fail fast (misses go to the source,
 * writes answer `ECC_VALKEY_UNAVAILABLE`) while every other shard's commands
 * go on as before.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { Breaker, type BreakerOptions } from './breaker.js';
import { primaries, primaryOf } from './slots.js';

/**
 * What a table's Valkey commands go through: the store's one {@link Breaker}
 * for a single server (or a Sentinel-managed primary), {@link ShardBreakers}
 * for a cluster. `key` is the command's first key: it picks the shard.
 */
export interface Circuit {
  run<T>(op: () => Promise<T>, key?: string): Promise<T>;
  /** True while some command would be refused or fail (some shard is unusable). */
  readonly degraded: boolean;
  close(): void;
}

/** The circuit for `client`: one breaker per primary for a cluster, one for anything else. */
export function circuitFor(
  client: Redis | Cluster,
  log: Logger,
  options?: BreakerOptions,
): Circuit {
  return isCluster(client)
    ? new ShardBreakers(client, log, options)
    : new Breaker(client, log, options);
}

/** True when `client` is an ioredis `Cluster`. */
export function isCluster(client: Redis | Cluster): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/**
 * A {@link Breaker} per primary (`host:port`), chosen per command by the slot
 * of its key in the client's current slot map. When a primary dies its
 * breaker opens after 3 failed commands and the shard's keys are answered
 * without L2; when its replica is promoted, the slot map names the new
 * primary, whose breaker is closed: fills resume at once. A command without
 * a key, or sent before the slot map is known, goes through a breaker of its
 * own.
 */
export class ShardBreakers implements Circuit {
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
  run<T>(op: () => Promise<T>, key?: string): Promise<T> {
    const primary = key === undefined ? undefined : primaryOf(this.#cluster, key);
    return this.#breaker(primary ?? 'unmapped').run(op);
  }

  /**
   * True when the cluster client is not ready, or the breaker of some primary
   * in the current slot map is open. Breakers of nodes that no longer serve a
   * slot (a failed primary after its replica took over) are dropped.
   */
  get degraded(): boolean {
    if (this.#cluster.status !== 'ready') return true;
    const current = primaries(this.#cluster);
    let degraded = false;
    for (const [primary, breaker] of this.#byPrimary) {
      if (!current.has(primary) && primary !== 'unmapped') {
        breaker.close();
        this.#byPrimary.delete(primary);
      } else if (breaker.degraded) {
        degraded = true;
      }
    }
    return degraded;
  }

  /** The primaries whose breaker is open (`host:port`), for logs and tests. */
  get openShards(): string[] {
    return [...this.#byPrimary].flatMap(([p, b]) => (b.degraded && p !== 'unmapped' ? [p] : []));
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
