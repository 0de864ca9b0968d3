/** What a change stream (Postgres's logical replication, MySQL's binlog) gives its follower. */

/**
 * The effect on one cache table of one committed transaction, or of several
 * consecutive ones taken together (what arrived while the last was applied).
 */
export interface ChangeBatch {
  /** The cache ids whose rows the transactions inserted, updated or deleted. */
  ids: ReadonlySet<string>;
  /** True when the transaction truncated a watched table. */
  truncated: boolean;
  /** The stream position just past the (last) transaction's commit (a byte offset). */
  position: bigint;
  /** The (earliest) commit's time on the database's clock, ms since the epoch. */
  commitTimeMs: number;
}

/** Where a stream delivers, one call at a time and in commit order. */
export interface StreamSink {
  /**
   * Applies a transaction's invalidations. The stream acknowledges the
   * transaction to the database only after this resolves; when it rejects the
   * stream stops, and the next run reads the transaction again.
   */
  apply(batch: ChangeBatch): Promise<void>;
  /** The run is streaming from the database: changes committed from now on will be delivered. */
  started(): void;
  /** The stream has passed `position` with nothing left to apply (a keepalive of an idle database). */
  passed(position: bigint): Promise<void>;
}

/** A database's change stream, read by the one instance holding its lease. */
export interface ChangeStream {
  /** The stream's name, unique per database (the replication slot's name): it names its lease and position. */
  readonly name: string;
  /**
   * Reads from the last acknowledged position until `signal` aborts
   * (resolves) or the stream fails (rejects: the connection dropped, the
   * slot is held by another connection, a sink call rejected).
   */
  run(sink: StreamSink, signal: AbortSignal): Promise<void>;
  /** Releases what the stream holds besides a run (a pool). Idempotent. */
  close(): Promise<void>;
}
