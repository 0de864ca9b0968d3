/**
 * One process of `bench:peers`, forked fresh for each measurement so that a
 * "cold" figure includes what a new process pays (cold JIT, first commands).
 * It builds one peer, answers `ready`, waits for `go` and then either fires a
 * herd (`readers` concurrent reads of one cold id) or a storm (`ids` read
 * `concurrency` at a time), and reports every read's latency, the source
 * reads it made and the loader's own durations; for echostore also when each
 * read was answered (epoch ms), which the fleet bench sets against the fill's event.
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
  /** echostore: when each read was answered, epoch ms (`performance.timeOrigin` + now: one host, one clock). */
  answeredAtMs: number[];
  /** The same, for the reads a flight answered from L2 first (not coalesced): a waiter's wake-up. */
  wokeAtMs: number[];
  /** The id each of `wokeAtMs` read. */
  wokeIds: string[];
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
    const answeredAtMs: number[] = [];
    const wokeAtMs: number[] = [];
    const wokeIds: string[] = [];
    let failed = 0;
    const read = async (id: string) => {
      const started = performance.now();
      try {
        const answer = await peer.get(id);
        const answeredAt = performance.now();
        latenciesMs.push(answeredAt - started);
        if (setup.peer === 'echostore') {
          const { layer, coalesced } = (answer ?? {}) as Record<string, unknown>;
          const at = performance.timeOrigin + answeredAt;
          answeredAtMs.push(at);
          if (layer === 'l2' && coalesced === false) {
            wokeAtMs.push(at);
            wokeIds.push(id);
          }
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
      answeredAtMs,
      wokeAtMs,
      wokeIds,
    };
  };
  return { run, close: () => peer.close() };
});
