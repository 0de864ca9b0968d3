/**
 * A bounded HTTP load generator for fault drills: a fixed number of loops,
 * each sending GETs of hot ids (expected L1 hits) and fresh cold ids (misses)
 * to the service instances, recording every request.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { itemUrl, type Timed, timedGet } from './http.js';

/** One request as the client saw it. */
export interface Sample extends Omit<Timed, 'body'> {
  /** The drill phase in effect when the request started. */
  phase: string;
  /** Label of the instance asked. */
  target: string;
  /** A hot id (warmed into that instance's L1 beforehand). */
  hot: boolean;
}

/** A service instance the generator may ask. */
export interface Target {
  label: string;
  /** Base URL of the service. */
  url: string;
}

/** Options of {@link LoadGenerator}. */
export interface LoadOptions {
  table: string;
  /** Concurrent request loops. */
  loops: number;
  /** Pause between two requests of one loop, ms. */
  pauseMs: number;
  hotIds: string[];
  /** Share of requests for hot ids, 0–1; the rest are fresh cold ids. */
  hotShare: number;
  /** Prefix of the cold ids (each is used once). */
  coldPrefix: string;
  /** Client-side bound of one request, ms (`AbortSignal.timeout`). */
  requestTimeoutMs: number;
  /** Bounds of the whole run: requests in all, and wall time, ms. */
  maxRequests: number;
  maxDurationMs: number;
}

/**
 * Runs `loops` request loops until {@link stop} (or its bounds). Each request
 * goes to a random current target; the phase and targets can change while it runs.
 */
export class LoadGenerator {
  /** Recorded with each request started from now on. */
  phase = '';
  /** Instances asked from now on; empty pauses the loops. */
  targets: Target[] = [];
  readonly samples: Sample[] = [];
  readonly #options: LoadOptions;
  #cold = 0;
  #sent = 0;
  #stopped = false;
  #loops: Promise<void>[] = [];

  constructor(options: LoadOptions) {
    this.#options = options;
  }

  start(): void {
    const deadline = Date.now() + this.#options.maxDurationMs;
    this.#loops = Array.from({ length: this.#options.loops }, () => this.#loop(deadline));
  }

  /** Stops the loops and waits for their last requests (each bounded by `requestTimeoutMs`). */
  async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all(this.#loops);
  }

  async #loop(deadline: number): Promise<void> {
    const o = this.#options;
    while (!this.#stopped && this.#sent < o.maxRequests && Date.now() < deadline) {
      const target = this.targets[Math.floor(Math.random() * this.targets.length)];
      if (target !== undefined) {
        this.#sent++;
        const hot = Math.random() < o.hotShare;
        const id = hot
          ? (o.hotIds[Math.floor(Math.random() * o.hotIds.length)] as string)
          : `${o.coldPrefix}${++this.#cold}`;
        const phase = this.phase;
        const { body: _, ...r } = await timedGet(
          itemUrl(target.url, o.table, id),
          o.requestTimeoutMs,
        );
        this.samples.push({ phase, target: target.label, hot, ...r });
      }
      await sleep(o.pauseMs);
    }
  }
}
