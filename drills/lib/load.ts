/**
 * Bounded request loops for the drills that judge a service under load: `loops` loops each
 * repeat one `step` (a request the drill chooses) and pause, recording what the step returns
 * with the phase in effect; and what such requests add up to.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { countBy, maxMs, p50p99 } from './report.js';

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
  /** True from `start` until `stop`. */
  running = false;
  readonly #tasks: Promise<void>[] = [];
  #steps = 0;
  #began = 0;

  constructor(readonly options: LoopOptions<S>) {}

  /** Starts the loops, and `beside` (e.g. a readiness probe that runs while they do). */
  start(...beside: Array<() => Promise<void>>): void {
    const o = this.options;
    this.running = true;
    this.#began = performance.now();
    const deadline = Date.now() + (o.maxDurationMs ?? Number.POSITIVE_INFINITY);
    const loop = async () => {
      while (this.running && this.#steps < (o.maxSteps ?? Number.POSITIVE_INFINITY)) {
        if (Date.now() >= deadline) break;
        this.#steps++;
        const sample = await o.step(this.phase);
        if (sample !== undefined) this.samples.push(sample);
        await sleep(o.pauseMs);
      }
    };
    this.#tasks.push(...beside.map((task) => task()), ...Array.from({ length: o.loops }, loop));
  }

  /** Ms since `start`. */
  now(): number {
    return performance.now() - this.#began;
  }

  /** Stops the loops and waits for their last steps. */
  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.#tasks);
  }
}

/** A request as a drill's load keeps it: its status (0: no answer), error code and time. */
export interface Answered {
  status: number;
  code: string | undefined;
  ms: number;
}

/**
 * What `samples` add up to: requests, answered 200, answered otherwise, lost (no answer), the
 * failed ones by `key` (default: error code, else status), p50 / p99 (1 decimal) and max ms.
 */
export function summarize<S extends Answered>(
  samples: S[],
  key: (s: S) => string = (s) => s.code ?? String(s.status),
) {
  const ms = samples.map((s) => s.ms);
  return {
    requests: samples.length,
    answered200: samples.filter((s) => s.status === 200).length,
    answeredOther: samples.filter((s) => s.status !== 200 && s.status !== 0).length,
    lost: samples.filter((s) => s.status === 0).length,
    failed: countBy(samples, (s) => (s.status === 200 ? undefined : key(s))),
    ...p50p99(ms, 1),
    maxMs: maxMs(ms),
  };
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
