/**
 * Reading the files a configuration names (the configuration itself, secrets,
 * certificates, warm-up ids) with a cap on their size, enforced while reading:
 * a file that never ends (`/dev/zero`, a FIFO, `/proc/…`) has a `stat` size of
 * 0, and `readFileSync` would grow without bound on it.
 */
import { closeSync, openSync, readSync } from 'node:fs';

/** The configuration file: a large fleet's is tens of KiB; past 1 MiB it is not one. */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;
/** A password file: a secret is at most a few hundred bytes. */
export const MAX_SECRET_FILE_BYTES = 64 * 1024;
/** A PEM private key: a 16384-bit RSA key is under 13 KiB. */
export const MAX_KEY_FILE_BYTES = 64 * 1024;
/** A PEM certificate file: a whole public CA bundle (Mozilla's) is about 220 KB. */
export const MAX_CERT_FILE_BYTES = 1024 * 1024;

/** Bytes read at a time. */
const CHUNK_BYTES = 64 * 1024;

/** A file that holds more than the cap of its kind. */
export class FileTooLargeError extends Error {
  readonly maxBytes: number;
  constructor(maxBytes: number) {
    super(`it holds more than ${maxBytes} bytes, the most this file may hold`);
    this.maxBytes = maxBytes;
  }
}

/**
 * The file's text (UTF-8, as `readFileSync(file, 'utf8')`), read up to
 * `maxBytes`: never more than `maxBytes + 1` bytes are read or held.
 *
 * @throws {FileTooLargeError} when the file holds more than `maxBytes`.
 * @throws the `fs` error when it cannot be opened or read (`ENOENT`, `EISDIR`, …).
 */
export function readFileUpTo(file: string, maxBytes: number): string {
  const fd = openSync(file, 'r');
  try {
    // In chunks, so that a small file under a large cap costs a small buffer.
    const chunks: Buffer[] = [];
    let length = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, maxBytes + 1 - length));
      const n = readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      chunks.push(n === chunk.length ? chunk : chunk.subarray(0, n));
      length += n;
      if (length > maxBytes) throw new FileTooLargeError(maxBytes);
    }
    return Buffer.concat(chunks, length).toString('utf8');
  } finally {
    closeSync(fd);
  }
}
