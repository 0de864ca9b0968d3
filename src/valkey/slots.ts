/**
 * Cluster slots: which of the 16384 hash slots a key lives in, and which
 * primary serves it now. The slot rule is the cluster specification's: CRC16
 * (XMODEM) of the key's hash tag — the text between the first `{` and the
 * first `}` after it, when that is non-empty — else of the whole key, modulo
 * 16384 (https://valkey.io/topics/cluster-spec/#hash-tags).
 */
import type { Cluster, Redis } from 'ioredis';

/** True when `client` is an ioredis `Cluster`. */
export function isCluster(client: Redis | Cluster): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/** Hash slots in a cluster. */
export const SLOTS = 16_384;

const TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
  TABLE[i] = crc & 0xffff;
}

/** CRC16/XMODEM (polynomial 0x1021, initial 0) of `bytes`. */
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes)
    crc = ((crc << 8) ^ (TABLE[((crc >> 8) ^ byte) & 0xff] as number)) & 0xffff;
  return crc;
}

/**
 * The hash slot of `key` (0–16383), as `CLUSTER KEYSLOT` computes it.
 *
 * @param key the key's text; hashed as its UTF-8 bytes.
 */
export function keySlot(key: string): number {
  const bytes = Buffer.from(key, 'utf8');
  const open = bytes.indexOf(0x7b); // {
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) return crc16(bytes.subarray(open + 1, close)) % SLOTS;
  }
  return crc16(bytes) % SLOTS;
}

/**
 * The primary that serves `key`'s slot in `cluster`'s current slot map
 * (`host:port`), or undefined before the map is known.
 */
export function primaryOf(cluster: Cluster, key: string): string | undefined {
  return cluster.slots[keySlot(key)]?.[0];
}

/**
 * Every primary in `cluster`'s current slot map (`host:port`), and how many
 * slots have none (a failed primary's slots, before its replica takes over,
 * as the server reports them).
 */
export function slotOwners(cluster: Cluster): { primaries: Set<string>; unmapped: number } {
  const primaries = new Set<string>();
  let unmapped = 0;
  for (let slot = 0; slot < SLOTS; slot++) {
    const owner = cluster.slots[slot]?.[0];
    if (owner === undefined) unmapped++;
    else primaries.add(owner);
  }
  return { primaries, unmapped };
}
