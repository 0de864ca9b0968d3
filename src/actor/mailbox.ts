/**
 * An actor's mailbox: messages are queued and handled one at a time, in
 * arrival order, on a microtask after the poster returns, so a handler never
 * runs inside the caller that posted (nor re-entrantly inside another handler).
 * A handler that throws does not stop the mailbox: `failed` is told (and
 * answers that message's callers), and the queue drains on.
 */
export class Mailbox<M> {
  readonly #handle: (message: M) => void;
  readonly #failed: (message: M, error: unknown) => void;
  readonly #drained: () => void;
  readonly #queue: (M | undefined)[] = [];
  #head = 0;
  #scheduled = false;

  /**
   * @param handle handles one message (synchronously).
   * @param failed called when `handle` threw for a message.
   * @param drained called each time the queue runs empty.
   */
  constructor(
    handle: (message: M) => void,
    failed: (message: M, error: unknown) => void,
    drained: () => void,
  ) {
    this.#handle = handle;
    this.#failed = failed;
    this.#drained = drained;
  }

  /** Messages waiting to be handled. */
  get depth(): number {
    return this.#queue.length - this.#head;
  }

  /** Queues a message. */
  post(message: M): void {
    this.#queue.push(message);
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(() => this.#drain());
    }
  }

  #drain(): void {
    while (this.#head < this.#queue.length) {
      const message = this.#queue[this.#head] as M;
      this.#queue[this.#head++] = undefined;
      try {
        this.#handle(message);
      } catch (err) {
        this.#failed(message, err);
      }
    }
    this.#queue.length = 0;
    this.#head = 0;
    this.#scheduled = false;
    this.#drained();
  }
}
