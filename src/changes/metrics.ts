/** The change streams' metrics, labelled by stream (the replication slot's name). */
import { Counter, Gauge, type Registry } from 'prom-client';

/** The metrics every follower of a registry shares. */
export interface ChangeMetrics {
  /** 1 on the instance reading the stream (holding its lease), 0 elsewhere. */
  holder: Gauge<'stream'>;
  /** Transactions applied (invalidated, position raised) before their acknowledgement. */
  transactions: Counter<'stream'>;
  /** Cache ids invalidated from the stream. */
  invalidations: Counter<'stream'>;
  /** TRUNCATEs of a watched table applied (each purged the cache table). */
  truncates: Counter<'stream'>;
  /** Runs that stopped on a failure and read again from the last acknowledged position. */
  restarts: Counter<'stream'>;
  /** The last applied transaction's commit → applied delay, seconds (0 once the stream is idle). */
  lagSeconds: Gauge<'stream'>;
  /** WAL the database keeps for the stream (current position − acknowledged), bytes. */
  lagBytes: Gauge<'stream'>;
  /** Per stream, how to read its lag in bytes at scrape time (undefined when unknown). */
  lagReaders: Map<string, () => Promise<number | undefined>>;
}

/** Registers the change streams' metrics in `registry` (once per registry). */
export function changeMetrics(registry: Registry): ChangeMetrics {
  const labelNames = ['stream'] as const;
  const registers = [registry];
  const lagReaders = new Map<string, () => Promise<number | undefined>>();
  return {
    lagReaders,
    holder: new Gauge({
      name: 'echostore_changes_holder',
      help: 'Whether this instance reads the change stream (holds its lease): 1 or 0.',
      labelNames,
      registers,
    }),
    transactions: new Counter({
      name: 'echostore_changes_transactions_total',
      help: 'Transactions of the change stream applied before their acknowledgement.',
      labelNames,
      registers,
    }),
    invalidations: new Counter({
      name: 'echostore_changes_invalidations_total',
      help: 'Cache ids invalidated from the change stream.',
      labelNames,
      registers,
    }),
    truncates: new Counter({
      name: 'echostore_changes_truncates_total',
      help: 'TRUNCATEs of a watched table applied, each as a purge of the whole cache table.',
      labelNames,
      registers,
    }),
    restarts: new Counter({
      name: 'echostore_changes_restarts_total',
      help: 'Change stream runs that failed and read again from the last acknowledged position.',
      labelNames,
      registers,
    }),
    lagSeconds: new Gauge({
      name: 'echostore_changes_lag_seconds',
      help: "The last applied transaction's commit-to-applied delay, seconds (0 while idle).",
      labelNames,
      registers,
    }),
    lagBytes: new Gauge({
      name: 'echostore_changes_lag_bytes',
      help: 'WAL the database keeps for the change stream: its current position minus the acknowledged one, bytes.',
      labelNames,
      registers,
      async collect() {
        const read = [...lagReaders].map(async ([stream, lag]) => {
          const bytes = await lag().catch(() => undefined);
          if (bytes === undefined) this.remove({ stream });
          else this.set({ stream }, bytes);
        });
        await Promise.all(read);
      },
    }),
  };
}
