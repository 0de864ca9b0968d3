/**
 * The fleet lease of one change stream: a Valkey key holding its holder's
 * random token with an expiry (`SET NX PX`), renewed by compare-token
 * `PEXPIRE` while the holder lives and deleted by compare-token `DEL` when it
 * stops. Whoever holds it is the one instance that reads the stream; when the
 * holder dies the key expires and another instance takes it.
 */
import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';

const RENEW = `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])`;
const RELEASE = `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])`;

/** One instance's side of a stream's lease. Holds no state but its token. */
export class StreamLease {
  /** This holder's token (random per instance and stream). */
  readonly token = randomUUID();
  readonly #valkey: Redis | Cluster;
  readonly #key: string;
  readonly #leaseMs: number;

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
   * Takes the lease if nobody holds it, or keeps it if this instance does.
   *
   * @returns true while this instance holds the lease.
   * @throws (rejects) the client's error when Valkey does not answer.
   */
  async hold(): Promise<boolean> {
    const renewed = await this.#valkey.eval(RENEW, 1, this.#key, this.token, this.#leaseMs);
    if (renewed === 1) return true;
    const taken = await this.#valkey.set(this.#key, this.token, 'PX', this.#leaseMs, 'NX');
    return taken === 'OK';
  }

  /** Gives the lease up if this instance holds it (a clean stop: the next holder starts at once). */
  async release(): Promise<void> {
    await this.#valkey.eval(RELEASE, 1, this.#key, this.token);
  }
}
