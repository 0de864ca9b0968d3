/**
 * PostgreSQL log sequence numbers (`pg_lsn`): text `X/Y`, two hexadecimal
 * 32-bit halves of one 64-bit byte position in the WAL.
 */
import { BadRequestError } from '../errors.js';

const LSN = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;

/**
 * The byte position of `text` (`16/B374D848`).
 *
 * @throws {BadRequestError} `ECC_BAD_REQUEST` when `text` is not an LSN.
 */
export function parseLsn(text: string): bigint {
  const m = LSN.exec(text);
  if (m === null)
    throw new BadRequestError(`not a Postgres LSN (X/Y in hexadecimal): ${text.slice(0, 40)}`);
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

/** `X/Y` text of a byte position. */
export function formatLsn(position: bigint): string {
  return `${(position >> 32n).toString(16).toUpperCase()}/${(position & 0xffffffffn).toString(16).toUpperCase()}`;
}
