/**
 * Read-your-writes over a change stream: a client that committed at
 * position P (Postgres: `pg_current_wal_lsn()` after its COMMIT, sent as
 * `Echostore-Min-Lsn`; MySQL/MariaDB: `SHOW MASTER STATUS`'s `File:Position`
 * after it, sent as `Echostore-Min-Binlog`) asks for an answer at least that
 * new. The stream's applied position is in Valkey; once it has reached P every
 * invalidation up to P is in Valkey, so a read past L1 (`Table.getFresh`) is
 * new enough. When the stream does not reach P within the bound, or Valkey does
 * not say within it where the stream is, the source answers instead (`Table.readSource`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Table } from '../store/table.js';
import type { ReadResult } from '../store/types.js';
import { within } from '../valkey/probe.js';
import type { StreamPosition } from './position.js';

/** How a read-your-writes answer was made: after the stream passed the position, or from the source. */
export type ReadAfterVia = 'stream' | 'source';

/** How often the position is polled while waiting, ms. */
const POLL_MS = 2;

/** The request header of a Postgres commit position (`X/Y`, `pg_current_wal_lsn()`). */
export const MIN_LSN_HEADER = 'echostore-min-lsn';
/** The request header of a MySQL/MariaDB commit position (`binlog.000042:1234`, `SHOW MASTER STATUS`). */
export const MIN_BINLOG_HEADER = 'echostore-min-binlog';

/** How a stream's clients name a commit position: the request header, and its parser. */
export interface PositionFormat {
  header: typeof MIN_LSN_HEADER | typeof MIN_BINLOG_HEADER;
  /** @throws {BadRequestError} `ECC_BAD_REQUEST` when the text is not a position. */
  parse(text: string): bigint;
}

/** One table's read-your-writes: its stream's position and how long to wait for it. */
export class ReadAfter {
  /** How this table's clients name a position. */
  readonly format: PositionFormat;
  readonly #position: StreamPosition;
  readonly #waitMs: number;

  /** @param waitMs the longest wait for the stream to reach a position, ms. */
  constructor(position: StreamPosition, waitMs: number, format: PositionFormat) {
    this.#position = position;
    this.#waitMs = waitMs;
    this.format = format;
  }

  /**
   * Reads `id` of `table` at least as new as stream position `at`.
   *
   * @throws (rejects) as {@link Table.getFresh} and {@link Table.readSource}.
   */
  async read(
    table: Table,
    id: string,
    at: bigint,
  ): Promise<{ result: ReadResult; via: ReadAfterVia }> {
    if (await this.#reached(at)) return { result: await table.getFresh(id), via: 'stream' };
    return { result: await table.readSource(id), via: 'source' };
  }

  async #reached(at: bigint): Promise<boolean> {
    const deadline = performance.now() + this.#waitMs;
    for (;;) {
      // Valkey not answering, or not within the wait: the position is unknown, so the source answers.
      const read = this.#position.read().catch(() => undefined);
      const position = await within(read, deadline - performance.now());
      if (position !== undefined && position >= at) return true;
      if (performance.now() >= deadline) return false;
      await sleep(POLL_MS);
    }
  }
}
