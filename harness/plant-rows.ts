/**
 * Writes rows straight into Valkey as fresh envelopes, as a table's source would have written
 * them: for tests and drills that need L2 full of large rows without loading them.
 */
import type { Redis } from 'ioredis';
import { encodeEnvelope } from '../src/l2/format.js';
import { valueKey } from '../src/l2/keys.js';

/** Plants `{ id, filler }` rows of about `rowBytes` characters for `ids`, fresh for `ttlMs`. */
export async function plantRows(
  raw: Redis,
  table: string,
  ids: readonly string[],
  options: { rowBytes: number; ttlMs: number; fingerprint?: string },
): Promise<void> {
  const soft = Date.now() + options.ttlMs;
  const filler = 'x'.repeat(options.rowBytes);
  for (let start = 0; start < ids.length; start += 50) {
    const pipeline = raw.pipeline();
    for (const [offset, id] of ids.slice(start, start + 50).entries()) {
      const text = encodeEnvelope({
        value: null,
        json: JSON.stringify({ id, filler }),
        version: 1_000 + start + offset,
        softExpiresAt: soft,
        hardExpiresAt: soft,
        deltaMs: 1,
        negative: false,
        ...(options.fingerprint === undefined ? {} : { fingerprint: options.fingerprint }),
      });
      pipeline.set(valueKey(table, id), text, 'PX', options.ttlMs);
    }
    await pipeline.exec();
  }
}
