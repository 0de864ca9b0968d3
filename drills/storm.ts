/**
 * Storm drill: P processes read Zipf-distributed keys of a cold table at one moment → one
 * source read per distinct key across the fleet. Usage and laws: drills/README.md#storm.
 */
import { randomBytes } from 'node:crypto';
import { withOrigin } from '../harness/origin.js';
import { drillArgs, fleetOptions, float, int, runDrill } from './lib/cli.js';
import { addCounts, law, listCounts, maxMs, p50p99, round, sum } from './lib/report.js';
import { drillValkey } from './lib/store.js';
import { runWorkers, together, workerFile } from './lib/workers.js';
import type { ReaderSetup, ReadsResult } from './reader-worker.js';

const args = drillArgs({
  instances: int(4, 1, 64),
  reads: int(2_000, 1, 1_000_000),
  keys: int(1_000, 1, 1_000_000),
  zipf: float(1.1, 0, 5),
  concurrency: int(64, 1, 10_000),
  'latency-ms': float(20, 0, 2_000),
  ...fleetOptions(),
});
const { instances, keys } = args;
/** The table policy: nothing expires or sheds during the storm, so every extra source read is a broken law. */
const POLICY = {
  coalescing: 'fleet',
  ttlMs: 600_000,
  ...{ loadTimeoutMs: 4_000, leaseMs: 5_000, waitTimeoutMs: 10_000 },
  ...{ maxConcurrentLoads: 1_000, initialConcurrentLoads: 1_000, maxQueueDelayMs: 10_000 },
} as const;

runDrill('storm', args.json, async () => {
  const table = 'storm';
  const prefix = `storm-${randomBytes(3).toString('hex')}-`;
  const ids = Array.from({ length: keys }, (_, k) => `${prefix}${k + 1}`);
  const valkey = await drillValkey(args.valkey, args.cluster, args.secure);
  try {
    return await withOrigin([args['latency-ms']], async (origin) => {
      const setup: ReaderSetup = {
        ...{ kind: 'setup', table, reads: args.reads, lanes: args.concurrency },
        ...{ valkey: valkey.target, template: origin.template, policy: POLICY },
      };
      const zipf = (seed: number) => ({ prefix, keys, s: args.zipf, seed });
      const setups = Array.from({ length: instances }, (_, i) => ({ ...setup, zipf: zipf(i + 1) }));
      const go = together(200, 120_000);
      const results = await runWorkers<ReadsResult>(workerFile('reader-worker'), setups, go);
      const answers = new Map<string, Set<string>>();
      for (const [id, seen] of results.flatMap((r) => Object.entries(r.answers)))
        answers.set(id, new Set([...(answers.get(id) ?? []), ...seen]));
      const distinctKeys = answers.size;
      const sourceReads = origin.totalReads();
      const readTwice = [...answers.keys()].filter((id) => origin.readsOf(id) > 1).length;
      const twoAnswers = [...answers.values()].filter((s) => s.size > 1).length;
      const failures = sum(results, (r) => r.failures);
      const errorCodes = results.reduce((c, r) => addCounts(c, r.errorCodes), {});
      const layers = results.reduce((c, r) => addCounts(c, r.layers), {});
      const ratio = distinctKeys === 0 ? Number.NaN : round(sourceReads / distinctKeys, 2);
      const latency = p50p99(results.flatMap((r) => r.latenciesMs));
      const reads = instances * args.reads;
      return {
        title: `storm drill: a cold Zipf storm, source latency ${args['latency-ms']} ms, on ${valkey.label}`,
        figures: {
          reads: `${reads} (${instances} instances × ${args.reads}, ${args.concurrency} at a time each)`,
          'distinct keys read': `${distinctKeys} of ${keys} (Zipf s = ${args.zipf})`,
          'source reads (counted by the source)': sourceReads,
          'answers by layer': listCounts(layers),
          'latency p50 / p99': `${latency.p50Ms} / ${latency.p99Ms} ms`,
          'slowest instance': `${maxMs(results.map((r) => r.durationMs))} ms`,
        },
        checks: [
          law('source reads ÷ distinct keys', ratio.toFixed(2), '1.00', ratio === 1),
          law('keys read from the source twice', readTwice, 0),
          law('keys with two answers', twoAnswers, 0),
          law('failed reads', failures && `${failures} (${listCounts(errorCodes)})`, 0),
        ],
      };
    });
  } finally {
    await valkey.drop(table, ids);
    await valkey.close();
  }
});
