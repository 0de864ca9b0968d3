/**
 * A change stream's applied position, kept in Valkey so that every instance
 * can tell how far the stream's invalidations have gone (read-your-writes
 * waits on it). Only ever raised: a replay of older changes after a takeover
 * does not lower it.
 */
import type { Cluster, Redis } from 'ioredis';

// Positions are decimal byte offsets; Lua compares them as doubles (exact below 2^53 bytes of WAL).
const RAISE = `local cur = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) > cur then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
return 0`;

/** The applied position of one stream. */
export class StreamPosition {
  readonly #valkey: Redis | Cluster;
  readonly #key: string;

  /** @param key the position's key (`ecc:changes:{<stream>}:position`). */
  constructor(valkey: Redis | Cluster, key: string) {
    this.#valkey = valkey;
    this.#key = key;
  }

  /**
   * Raises the stored position to `position` (a byte offset) unless it is already past it.
   *
   * @throws (rejects) the client's error when Valkey does not answer.
   */
  async raise(position: bigint): Promise<void> {
    await this.#valkey.eval(RAISE, 1, this.#key, position.toString());
  }

  /**
   * The stored position, or undefined when none is stored (a new stream, or Valkey lost it).
   *
   * @throws (rejects) the client's error when Valkey does not answer.
   */
  async read(): Promise<bigint | undefined> {
    const text = await this.#valkey.get(this.#key);
    return text === null ? undefined : BigInt(text);
  }
}

/**
 * The keys of stream `name` in `namespace` (one hash tag: one cluster slot):
 * `ecc:<namespace>:changes:{<name>}:…`, or `ecc:changes:{<name>}:…` in the unnamed one.
 * `binlog` is a MySQL stream's resume position (`file:offset`).
 */
export function streamKeys(
  name: string,
  namespace = '',
): { lease: string; position: string; binlog: string } {
  const prefix = `ecc:${namespace === '' ? '' : `${namespace}:`}changes:{${name}}`;
  return { lease: `${prefix}:lease`, position: `${prefix}:position`, binlog: `${prefix}:binlog` };
}
