/**
 * Bounded request loops for the drills that judge a service under load:
 * `loops` loops each repeat one `step` (a request the drill chooses) and
 * pause, recording what the step returns with the phase in effect.
 */
import { setTimeout as sleep } from 'node:timers/promises';

/** Options of {@link Loops}. */
export interface LoopOptions<S> {
  loops: number;
  /** Pause after each step of one loop, ms. */
  pauseMs: number;
  /** One request: what to record, or undefined to record nothing this turn. */
  step(phase: string): Promise<S | undefined>;
  /** Bounds of the whole run: steps in all, and wall time, ms. Default unbounded (until `stop`). */
  maxSteps?: number;
  maxDurationMs?: number;
}

/** The loops: `start`, then `phase` changes as the drill goes, then `stop`. */
export class Loops<S> {
  /** Recorded with each step started from now on. */
  phase = '';
  readonly samples: S[] = [];
  readonly #o: LoopOptions<S>;
  readonly #tasks: Promise<void>[] = [];
  #running = false;
  #steps = 0;
  #began = 0;

  constructor(options: LoopOptions<S>) {
    this.#o = options;
  }

  /** True from `start` until `stop`. */
  get running(): boolean {
    return this.#running;
  }

  /** Starts the loops, and `beside` (e.g. a readiness probe that runs while they do). */
  start(...beside: Array<() => Promise<void>>): void {
    this.#running = true;
    this.#began = performance.now();
    const deadline = Date.now() + (this.#o.maxDurationMs ?? Number.POSITIVE_INFINITY);
    for (const task of beside) this.#tasks.push(task());
    for (let i = 0; i < this.#o.loops; i++) this.#tasks.push(this.#loop(deadline));
  }

  /** Ms since `start`. */
  now(): number {
    return performance.now() - this.#began;
  }

  /** Stops the loops and waits for their last steps. */
  async stop(): Promise<void> {
    this.#running = false;
    await Promise.all(this.#tasks);
  }

  async #loop(deadline: number): Promise<void> {
    const o = this.#o;
    while (this.#running && this.#steps < (o.maxSteps ?? Number.POSITIVE_INFINITY)) {
      if (Date.now() >= deadline) break;
      this.#steps++;
      const sample = await o.step(this.phase);
      if (sample !== undefined) this.samples.push(sample);
      await sleep(o.pauseMs);
    }
  }
}

/** Calls `fn` on every item from `lanes` concurrent lanes, each taking the next item when free. */
export async function inLanes<T>(
  lanes: number,
  items: readonly T[],
  fn: (item: T) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: lanes }, lane));
}

/** A random element of `xs` (undefined when empty). */
export const pick = <T>(xs: readonly T[]): T | undefined =>
  xs[Math.floor(Math.random() * xs.length)];
