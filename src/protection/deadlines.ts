/**
 * The `waitTimeoutMs` bound of every caller that missed L1, kept by one timer
 * per table instead of one per caller: a waiter costs an entry in a queue,
 * not a timer, so a herd of 20 000 callers arms one.
 *
 * Every caller of a table waits the same `waitTimeoutMs` on one monotonic
 * clock, so deadlines rise in arrival order: the queue is sorted by
 * construction, and the timer is always due at its oldest pending entry.
 */
import type { Waiter } from '../actor/flight.js';
import type { ReadResult } from '../store/types.js';

/**
 * A read waiting for its answer: settled once, by its answer, its error or
 * its deadline. `count` callers share it (and its `promise`): one, or the
 * callers that coalesced onto a miss message still in the mailbox.
 */
export class PendingRead implements Waiter {
  readonly id: string;
  /** performance.now() past which the callers get their timeout error. */
  readonly deadline: number;
  readonly promise: Promise<ReadResult>;
  /** Callers sharing this read; only the table adds to it, before the owner handles it. */
  count = 1;
  settled = false;
  #resolve!: (result: ReadResult) => void;
  #reject!: (error: Error) => void;
  readonly #book: WaitDeadlines;

  constructor(book: WaitDeadlines, id: string, deadline: number) {
    this.#book = book;
    this.id = id;
    this.deadline = deadline;
    this.promise = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  resolve(result: ReadResult): void {
    if (this.settled) return;
    this.settled = true;
    this.#resolve(result);
    this.#book.settled();
  }

  reject(error: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.#reject(error);
    this.#book.settled();
  }
}

/** Settled entries a queue may carry before it is compacted (beyond twice the pending ones). */
const SLACK = 1_024;

/** The pending reads of one table, oldest first, and the one timer that bounds their wait. */
export class WaitDeadlines {
  readonly #timeoutMs: number;
  readonly #timedOut: (id: string) => Error;
  readonly #now: () => number;
  #queue: PendingRead[] = [];
  #head = 0;
  #pending = 0;
  #timer: NodeJS.Timeout | undefined;

  /**
   * @param timeoutMs how long each caller may wait (`waitTimeoutMs`).
   * @param timedOut the error of a caller that waited that long.
   */
  constructor(timeoutMs: number, timedOut: (id: string) => Error, now = () => performance.now()) {
    this.#timeoutMs = timeoutMs;
    this.#timedOut = timedOut;
    this.#now = now;
  }

  /** Callers waiting now. */
  get pending(): number {
    return this.#pending;
  }

  /** A new read of `id`, due `waitTimeoutMs` from now. */
  add(id: string): PendingRead {
    const read = new PendingRead(this, id, this.#now() + this.#timeoutMs);
    this.#queue.push(read);
    this.#pending++;
    if (this.#timer === undefined) this.#arm(read.deadline);
    return read;
  }

  /** @internal A waiter settled. */
  settled(): void {
    this.#pending--;
    if (this.#pending === 0) {
      // The usual end of a burst: nothing waits, so nothing needs the timer.
      this.#queue.length = 0;
      this.#head = 0;
      this.#disarm();
    } else if (this.#queue.length - this.#head > 2 * this.#pending + SLACK) {
      this.#queue = this.#queue.filter((r, i) => i >= this.#head && !r.settled);
      this.#head = 0;
    }
  }

  /** Fails every caller past its deadline, then waits for the next one. */
  #sweep(): void {
    this.#timer = undefined;
    const now = this.#now();
    while (this.#head < this.#queue.length) {
      const read = this.#queue[this.#head] as PendingRead;
      if (!read.settled && read.deadline > now) {
        this.#arm(read.deadline);
        return;
      }
      // Past it before settling it: settling may compact the queue from the head on.
      this.#head++;
      if (!read.settled) read.reject(this.#timedOut(read.id));
    }
  }

  #arm(at: number): void {
    this.#timer = setTimeout(() => this.#sweep(), Math.max(0, Math.ceil(at - this.#now())));
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
