import type { ShedError } from '../errors.js';

interface Queued {
  grant(): void;
  timer: NodeJS.Timeout;
}

/**
 * Caps the loader calls of one table in this process (`maxConcurrentLoads`),
 * with a bounded FIFO queue (`maxQueuedLoads`) in front: a load beyond both,
 * or one that waits in the queue longer than it may, is shed with `ECC_SHED`
 * instead of queueing without bound. This is what protects the source.
 */
export class LoadGate {
  readonly #max: number;
  readonly #maxQueued: number;
  #active = 0;
  readonly #queue: Queued[] = [];

  constructor(maxConcurrent: number, maxQueued: number) {
    this.#max = maxConcurrent;
    this.#maxQueued = maxQueued;
  }

  /** Loader calls running now. */
  get active(): number {
    return this.#active;
  }

  /** Loads waiting for a slot now. */
  get queued(): number {
    return this.#queue.length;
  }

  /**
   * Takes a slot, waiting in the queue at most `waitMs`.
   *
   * @throws {ShedError} (via `shed()`) when the queue is full or the wait ran out.
   */
  acquire(waitMs: number, shed: () => ShedError): Promise<void> {
    if (this.#active < this.#max) {
      this.#active++;
      return Promise.resolve();
    }
    if (this.#queue.length >= this.#maxQueued || waitMs <= 0) return Promise.reject(shed());
    return new Promise((resolve, reject) => {
      const entry: Queued = {
        grant: () => {
          clearTimeout(entry.timer);
          this.#active++;
          resolve();
        },
        timer: setTimeout(() => {
          const i = this.#queue.indexOf(entry);
          if (i >= 0) this.#queue.splice(i, 1);
          reject(shed());
        }, waitMs),
      };
      this.#queue.push(entry);
    });
  }

  /** Frees a slot and hands it to the longest-waiting load. */
  release(): void {
    this.#active--;
    const next = this.#queue.shift();
    next?.grant();
  }
}
