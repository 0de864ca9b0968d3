/**
 * The fleet lease of one change stream: a Valkey key holding its holder's
 * random token with an expiry, renewed while the holder lives and marked
 * `released` (compare-token) when it stops, so that another instance takes it
 * at once. Whoever holds it is the one instance that reads the stream; when
 * the holder dies the key expires and another instance takes it.
 *
 * A missing key is taken at once only by the instance that held it at its last
 * look: a Valkey restart or failover that loses the key then leaves the lease
 * where it was. Any other instance takes a missing key only when it was missing
 * at its previous look too, one renewal period earlier; by then a live holder
 * has set it again. A holder change costs a stream restart on the database
 * side (its slot is still active for the old reader for a moment), so keeping
 * the holder keeps the invalidation lag of a Valkey restart short.
 */
import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';

/**
 * KEYS[1] the lease; ARGV[1] this holder's token, ARGV[2] the lease in ms, ARGV[3] '1' when this
 * instance may take a missing key. Returns 1: held (renewed or taken); 0: another holder's; -1: missing, not taken.
 */
const HOLD = `local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if v and v ~= 'released' then return 0 end
if v or ARGV[3] == '1' then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return -1`;
/** KEYS[1] the lease; ARGV[1] this holder's token, ARGV[2] the lease in ms. */
const RELEASE = `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('SET', KEYS[1], 'released', 'PX', ARGV[2])`;

/** One instance's side of a stream's lease: its token and what its last look found. */
export class StreamLease {
  /** This holder's token (random per instance and stream). */
  readonly token = randomUUID();
  readonly #valkey: Redis | Cluster;
  readonly #key: string;
  readonly #leaseMs: number;
  /** What the last answered look found: this instance held it, or the key was missing. Written by {@link hold} only. */
  #last: 'held' | 'missing' | 'other' = 'other';

  /**
   * @param key the lease's key (`ecc:changes:{<stream>}:lease`).
   * @param leaseMs how long the lease outlives its holder's last renewal, ms.
   */
  constructor(valkey: Redis | Cluster, key: string, leaseMs: number) {
    this.#valkey = valkey;
    this.#key = key;
    this.#leaseMs = leaseMs;
  }

  /**
   * Keeps the lease if this instance holds it; takes a missing one if this
   * instance held it at its last look, or found it missing then too. Call it
   * once per renewal period (a quarter of the lease).
   *
   * @returns true while this instance holds the lease.
   * @throws (rejects) the client's error when Valkey does not answer.
   */
  async hold(): Promise<boolean> {
    const take = this.#last === 'other' ? '0' : '1';
    const found = await this.#valkey.eval(HOLD, 1, this.#key, this.token, this.#leaseMs, take);
    this.#last = found === 1 ? 'held' : found === -1 ? 'missing' : 'other';
    return found === 1;
  }

  /** Gives the lease up if this instance holds it (a clean stop: another instance takes it at its next look). */
  async release(): Promise<void> {
    this.#last = 'other';
    await this.#valkey.eval(RELEASE, 1, this.#key, this.token, this.#leaseMs);
  }
}
