/**
 * One process of `bench:peers`, forked fresh for each measurement so that a cold figure includes
 * what a new process pays (cold JIT, first commands): builds one peer, then fires its `shape` and
 * reports every read's latency and the loader's own durations.
 */
import { setTimeout as sleep } from 'node:timers/promises';
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
  /** The loader's durations, one per source read. */
  loaderMs: number[];
  /** echostore: when each read was answered, epoch ms (`performance.timeOrigin` + now: one host, one clock). */
  answeredAtMs: number[];
  /** The same, for the reads a flight answered from L2 first (not coalesced): a waiter's wake-up. */
  wokeAtMs: number[];
  /** The id each of `wokeAtMs` read. */
  wokeIds: string[];
}

runWorker<Setup>(async (setup) => {
  const { peer: name, shape } = setup;
  const loader = sleepLoader(setup.latencyMs);
  const peer = await makePeer(name, { ...setup, load: loader.load });
  await sleep(setup.settleMs ?? 0);
  const result: Result = {
    ...{ latenciesMs: [], failed: 0, loaderMs: loader.durationsMs },
    ...{ answeredAtMs: [], wokeAtMs: [], wokeIds: [] },
  };
  const read = async (id: string) => {
    const started = performance.now();
    try {
      const answer = (await peer.get(id)) as { layer?: string; coalesced?: boolean } | undefined;
      const answeredAt = performance.now();
      result.latenciesMs.push(answeredAt - started);
      if (name !== 'echostore') return;
      const at = performance.timeOrigin + answeredAt;
      result.answeredAtMs.push(at);
      if (answer?.layer === 'l2' && answer.coalesced === false) {
        result.wokeAtMs.push(at);
        result.wokeIds.push(id);
      }
    } catch {
      result.failed++;
    }
  };
  const run = async () => {
    if (shape.kind === 'herd') {
      await Promise.all(Array.from({ length: shape.readers }, () => read(shape.id)));
    } else if (shape.kind === 'storm') {
      await inLanes(shape.concurrency, shape.ids, read);
    } else {
      const start = performance.now();
      await Promise.all(
        shape.ids.map(async (id, i) => {
          await sleep(start + i * shape.everyMs - performance.now());
          await read(id);
        }),
      );
    }
    return result;
  };
  return { run, close: () => peer.close() };
});
