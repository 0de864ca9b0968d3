/**
 * An actor's mailbox: messages are queued and handled one at a time, in
 * arrival order, on a microtask after the poster returns, so a handler never
 * runs inside the caller that posted (nor re-entrantly inside another handler).
 */
export class Mailbox<M> {
  readonly #handle: (message: M) => void;
  readonly #drained: () => void;
  readonly #queue: (M | undefined)[] = [];
  #head = 0;
  #scheduled = false;

  /**
   * @param handle handles one message (synchronously).
   * @param drained called each time the queue runs empty.
   */
  constructor(handle: (message: M) => void, drained: () => void) {
    this.#handle = handle;
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
      this.#handle(message);
    }
    this.#queue.length = 0;
    this.#head = 0;
    this.#scheduled = false;
    this.#drained();
  }
}
