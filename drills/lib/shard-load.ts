/**
 * A steady mixed load for the failover drill: loops that GET hot ids (warmed
 * into L1), GET fresh cold ids and PUT write ids, each request to a random
 * service instance, every request recorded with the shard its id lives on.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { errorCode, itemUrl } from './http.js';

/** What a request of the mix does. */
export type RequestKind = 'hot GET' | 'cold GET' | 'PUT';

/** Which side of the failover an id's keys live on. */
export type Side = 'lost' | 'other';

/** One request as the client saw it. */
export interface ShardSample {
  phase: string;
  kind: RequestKind;
  side: Side;
  id: string;
  /** Instance asked (its index). */
  target: number;
  /** HTTP status; 0 when no answer arrived. */
  status: number;
  code: string | undefined;
  /** `Cache-Status` said `stored`: the answer was loaded and kept (in L1 at least). */
  stored: boolean;
  /** For a cold GET, judged after the run: a second read on the other instance cost the source nothing. */
  inL2?: boolean;
  /** `Cache-Status` said `detail=l1`. */
  l1: boolean;
  /** When it started, ms since the load began. */
  atMs: number;
  ms: number;
}

/** Options of {@link ShardLoad}. */
export interface ShardLoadOptions {
  table: string;
  /** Base URLs of the service instances. */
  targets: string[];
  loops: number;
  pauseMs: number;
  hotIds: string[];
  writeIds: string[];
  /** Cold ids are `<coldPrefix><n>`, each used once. */
  coldPrefix: string;
  /** The side an id lives on. */
  sideOf(id: string): Side;
  /** Shares of hot GETs and cold GETs; the rest are PUTs. */
  hotShare: number;
  coldShare: number;
  requestTimeoutMs: number;
}

/** The load: `start`, then `phase` changes as the drill goes, then `stop`. */
export class ShardLoad {
  /** Recorded with each request started from now on. */
  phase = '';
  readonly samples: ShardSample[] = [];
  readonly #o: ShardLoadOptions;
  #cold = 0;
  #writes = 0;
  #stopped = false;
  #loops: Promise<void>[] = [];
  #began = 0;

  constructor(options: ShardLoadOptions) {
    this.#o = options;
  }

  start(): void {
    this.#began = performance.now();
    this.#loops = Array.from({ length: this.#o.loops }, () => this.#loop());
  }

  /** Ms since `start`. */
  now(): number {
    return performance.now() - this.#began;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all(this.#loops);
  }

  async #loop(): Promise<void> {
    const o = this.#o;
    const pick = <T>(xs: T[]) => xs[Math.floor(Math.random() * xs.length)] as T;
    while (!this.#stopped) {
      const r = Math.random();
      const kind: RequestKind =
        r < o.hotShare ? 'hot GET' : r < o.hotShare + o.coldShare ? 'cold GET' : 'PUT';
      const id =
        kind === 'hot GET'
          ? pick(o.hotIds)
          : kind === 'cold GET'
            ? `${o.coldPrefix}${++this.#cold}`
            : pick(o.writeIds);
      const target = Math.floor(Math.random() * o.targets.length);
      const phase = this.phase;
      const atMs = this.now();
      const body = kind === 'PUT' ? JSON.stringify({ id, write: ++this.#writes }) : undefined;
      const answer = await request(
        o.targets[target] as string,
        o.table,
        id,
        body,
        o.requestTimeoutMs,
      );
      this.samples.push({ phase, kind, side: o.sideOf(id), id, target, atMs, ...answer });
      await sleep(o.pauseMs);
    }
  }
}

/** One timed GET (or PUT of `body`); never rejects. */
export async function request(
  base: string,
  table: string,
  id: string,
  body: string | undefined,
  timeoutMs: number,
): Promise<Pick<ShardSample, 'status' | 'code' | 'stored' | 'l1' | 'ms'>> {
  const started = performance.now();
  try {
    const res = await fetch(itemUrl(base, table, id), {
      method: body === undefined ? 'GET' : 'PUT',
      ...(body === undefined ? {} : { body, headers: { 'content-type': 'application/json' } }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    const cacheStatus = res.headers.get('cache-status') ?? '';
    return {
      status: res.status,
      code: res.ok ? undefined : (errorCode(text) ?? 'NO_CODE'),
      stored: /;\s*stored(;|$)/.test(cacheStatus),
      l1: /detail=l1(;|$)/.test(cacheStatus),
      ms: performance.now() - started,
    };
  } catch (err) {
    const e = err as Error;
    const code = e.name === 'TimeoutError' ? 'CLIENT_TIMEOUT' : (errorCode(e) ?? e.name);
    return { status: 0, code, stored: false, l1: false, ms: performance.now() - started };
  }
}
