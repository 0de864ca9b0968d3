/**
 * A table's purge epochs as this instance knows them: the time of the latest
 * hard and soft purge of the table and of each purged tag, on Valkey's clock
 * (µs). A row born at or before an epoch of its table or of one of its tags
 * is purged (hard: a miss; soft: stale). Read from Valkey at start and after
 * every subscriber reconnect, and kept current by the purge events in
 * between, so a read decides without a round trip.
 *
 * The hot path pays one comparison: a row born after {@link Epochs.newest}
 * (every row loaded since the last purge) is never purged, whatever its tags.
 */

/** A row is not purged. */
export const NOT_PURGED = 0;
/** A row is soft-purged: served stale while one refresh runs. */
export const SOFT_PURGED = 1;
/** A row is hard-purged: a miss. */
export const HARD_PURGED = 2;

/** What {@link Epochs.judge} says of a row. */
export type PurgeState = typeof NOT_PURGED | typeof SOFT_PURGED | typeof HARD_PURGED;

/** One purge, as applied: its epoch (µs), hard or soft, the tags or (undefined) the table. */
export interface Purge {
  epoch: number;
  soft: boolean;
  tags: readonly string[] | undefined;
}

/** Reads the stored epochs (`HGETALL` of the table's epochs hash). */
export type EpochsReader = () => Promise<Record<string, string>>;

/** No purge yet: below every `born` (0 included). */
const NONE = -1;

export class Epochs {
  #newest = NONE;
  #tableHard = NONE;
  #tableSoft = NONE;
  readonly #hard = new Map<string, number>();
  readonly #soft = new Map<string, number>();
  /** Whether what is held is known to include every purge (false until read, and after a reconnect). */
  #proven = false;
  #provenAtMs = 0;
  #reading: Promise<void> | undefined;
  readonly #read: EpochsReader;
  readonly #maxAgeMs: number;
  readonly #now: () => number;

  /**
   * @param read reads the stored epochs.
   * @param maxAgeMs how long a reading stays proven without events (coherence off: the L1 TTL);
   *   `Infinity` while purge events keep it current.
   * @param now a monotonic clock, ms.
   */
  constructor(
    read: EpochsReader,
    maxAgeMs = Number.POSITIVE_INFINITY,
    now = () => performance.now(),
  ) {
    this.#read = read;
    this.#maxAgeMs = maxAgeMs;
    this.#now = now;
  }

  /** The newest epoch held (-1 before any purge): a row born after it is not purged. */
  get newest(): number {
    return this.#newest;
  }

  /**
   * Whether a row born at `born` (µs on Valkey's clock) with `tags` is purged.
   * Hard wins over soft; the table's epochs cover every row.
   */
  judge(born: number, tags: readonly string[] | undefined): PurgeState {
    if (born > this.#newest) return NOT_PURGED;
    if (born <= this.#tableHard) return HARD_PURGED;
    let state: PurgeState = born <= this.#tableSoft ? SOFT_PURGED : NOT_PURGED;
    if (tags === undefined) return state;
    for (const tag of tags) {
      if (born <= (this.#hard.get(tag) ?? NONE)) return HARD_PURGED;
      if (born <= (this.#soft.get(tag) ?? NONE)) state = SOFT_PURGED;
    }
    return state;
  }

  /** Takes in one purge (this instance's own, or another's event); epochs only ever grow. */
  apply(purge: Purge): void {
    const { epoch, soft, tags } = purge;
    if (tags === undefined) {
      if (soft) this.#tableSoft = Math.max(this.#tableSoft, epoch);
      else this.#tableHard = Math.max(this.#tableHard, epoch);
    } else {
      const map = soft ? this.#soft : this.#hard;
      for (const tag of tags) map.set(tag, Math.max(map.get(tag) ?? NONE, epoch));
    }
    if (epoch > this.#newest) this.#newest = epoch;
  }

  /** Events may have been missed (the subscriber reconnected): the next {@link ensure} reads Valkey again. */
  unprove(): void {
    this.#proven = false;
  }

  /** Purged tags held (hard and soft), for diagnostics and tests. */
  get size(): number {
    return this.#hard.size + this.#soft.size;
  }

  /**
   * Undefined while what is held is proven (no await, so a batch's flights
   * still send their Valkey commands in one tick); else a promise that
   * resolves after one reading of Valkey asked since the last {@link unprove},
   * shared by every caller that asks meanwhile.
   *
   * @throws (rejects) what the reading throws (Valkey unreachable); still unproven then.
   */
  ensure(): Promise<void> | undefined {
    const reading = this.#reading;
    if (this.#proven && reading === undefined && this.#now() - this.#provenAtMs < this.#maxAgeMs) {
      return undefined;
    }
    if (this.#proven && reading !== undefined) return reading;
    // Proven as of the moment of asking: an event after it is applied on top.
    const askedAtMs = this.#now();
    this.#proven = true;
    const next: Promise<void> = this.#read().then(
      (stored) => {
        this.#merge(stored);
        if (this.#reading !== next) return;
        this.#reading = undefined;
        this.#provenAtMs = askedAtMs;
      },
      (err: unknown) => {
        if (this.#reading === next) {
          this.#reading = undefined;
          this.#proven = false;
        }
        throw err;
      },
    );
    this.#reading = next;
    return next;
  }

  #merge(stored: Record<string, string>): void {
    for (const [field, text] of Object.entries(stored)) {
      const epoch = Number(text);
      if (!Number.isSafeInteger(epoch) || epoch <= 0) continue;
      const soft = field[0] === 'S';
      if (!soft && field[0] !== 'H') continue;
      this.apply({ epoch, soft, tags: field.length === 1 ? undefined : [field.slice(1)] });
    }
  }
}
