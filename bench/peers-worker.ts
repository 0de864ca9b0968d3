/**
 * One process of `bench:peers`, forked fresh for each measurement so that a
 * "cold" figure includes what a new process pays (cold JIT, first commands).
 * It builds one peer, answers `ready`, waits for `go` and then either fires a
 * herd (`readers` concurrent reads of one cold id) or a storm (`ids` read
 * `concurrency` at a time), and reports every read's latency, the source
 * reads it made and the loader's own durations; for echostore also how long
 * after its value was written to L2 each read was answered.
 */
import { inLanes } from '../drills/lib/load.js';
import { runWorker } from '../drills/lib/workers.js';
import { makePeer, type PeerName, sleepLoader } from './peers-lib.js';

export interface Setup {
  kind: 'setup';
  peer: PeerName;
  valkey: string;
  tag: string;
  latencyMs: number;
  /** herd: `readers` reads of `id` at once; storm: `ids` in order, `concurrency` at a time. */
  shape:
    | { kind: 'herd'; id: string; readers: number }
    | { kind: 'storm'; ids: string[]; concurrency: number }
    /** One read of `ids[i]` at `i × everyMs` from the start (every process on the same schedule). */
    | { kind: 'paced'; ids: string[]; everyMs: number };
  policy?: Record<string, unknown>;
  /** How long to wait after the peer is built before answering `ready` (its start-up commands land first), ms. */
  settleMs?: number;
}

export interface Result {
  latenciesMs: number[];
  failed: number;
  sourceReads: number;
  loaderMs: number[];
  /**
   * echostore: ms from the moment Valkey wrote each answer's value (its version is Valkey's
   * clock then, µs) to the moment the read was answered here (wall clock; one host, one clock).
   */
  sinceWriteMs: number[];
  /** The same, for the reads a flight answered from L2 first (not coalesced): a waiter's wake-up. */
  wokeMs: number[];
}

runWorker<Setup>(async (setup) => {
  const loader = sleepLoader(setup.latencyMs);
  const peer = await makePeer(setup.peer, {
    valkey: setup.valkey,
    tag: setup.tag,
    load: loader.load,
    policy: setup.policy,
  });
  if (setup.settleMs !== undefined) await new Promise((r) => setTimeout(r, setup.settleMs));
  const run = async (): Promise<Result> => {
    const latenciesMs: number[] = [];
    const sinceWriteMs: number[] = [];
    const wokeMs: number[] = [];
    let failed = 0;
    const read = async (id: string) => {
      const started = performance.now();
      try {
        const answer = await peer.get(id);
        const answeredAt = performance.now();
        latenciesMs.push(answeredAt - started);
        const { version, layer, coalesced } = (answer ?? {}) as Record<string, unknown>;
        if (setup.peer === 'echostore' && typeof version === 'number') {
          const ms = performance.timeOrigin + answeredAt - version / 1000;
          sinceWriteMs.push(ms);
          if (layer === 'l2' && coalesced === false) wokeMs.push(ms);
        }
      } catch {
        failed++;
      }
    };
    const { shape } = setup;
    if (shape.kind === 'herd') {
      await Promise.all(Array.from({ length: shape.readers }, () => read(shape.id)));
    } else if (shape.kind === 'storm') {
      await inLanes(shape.concurrency, shape.ids, read);
    } else {
      const start = performance.now();
      const { ids, everyMs } = shape;
      await Promise.all(
        ids.map(async (id, i) => {
          await new Promise((r) => setTimeout(r, start + i * everyMs - performance.now()));
          await read(id);
        }),
      );
    }
    return {
      latenciesMs,
      failed,
      sourceReads: loader.durationsMs.length,
      loaderMs: loader.durationsMs,
      sinceWriteMs,
      wokeMs,
    };
  };
  return { run, close: () => peer.close() };
});
