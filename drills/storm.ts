/**
 * Storm drill: P processes read Zipf-distributed keys of a cold table at one moment → one
 * source read per distinct key across the fleet. Usage and laws: drills/README.md#storm.
 */
import { randomBytes } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Origin, startOrigin } from '../harness/origin.js';
import { drillArgs, flag, float, int, runDrill, valkeyOption } from './lib/cli.js';
import { Reaper } from './lib/reaper.js';
import { addCounts, columns, listCounts, p50p99, round } from './lib/report.js';
import { dropId } from './lib/store.js';
import { drillValkey } from './lib/valkey-target.js';
import { runWorkers, together } from './lib/workers.js';
import type { StormResult, StormSetup } from './storm-worker.js';

const args = drillArgs({
  instances: int(4, 1, 64),
  reads: int(2_000, 1, 1_000_000),
  keys: int(1_000, 1, 1_000_000),
  zipf: float(1.1, 0, 5),
  concurrency: int(64, 1, 10_000),
  'latency-ms': float(20, 0, 2_000),
  valkey: valkeyOption(),
  cluster: flag(),
  secure: flag(),
});

const WORKER = resolve(dirname(fileURLToPath(import.meta.url)), 'storm-worker.js');
/** The table policy: nothing expires or sheds during the storm, so every extra source read is a broken law. */
const POLICY = {
  ttlMs: 600_000,
  loadTimeoutMs: 4_000,
  leaseMs: 5_000,
  waitTimeoutMs: 10_000,
  maxConcurrentLoads: 1_000,
  initialConcurrentLoads: 1_000,
  maxQueueDelayMs: 10_000,
};

async function main() {
  const run = randomBytes(3).toString('hex');
  const table = 'storm';
  const prefix = `storm-${run}-`;
  const valkey = await drillValkey(args.valkey, args.cluster, args.secure);
  const reaper = new Reaper();
  let origin: Origin | undefined;
  let results: StormResult[] = [];
  const began = performance.now();
  try {
    origin = await startOrigin(args['latency-ms']);
    const template = origin.template;
    const setups = Array.from(
      { length: args.instances },
      (_, i): StormSetup => ({
        kind: 'setup',
        table,
        prefix,
        keys: args.keys,
        zipf: args.zipf,
        reads: args.reads,
        concurrency: args.concurrency,
        seed: i + 1,
        valkey: valkey.target,
        template,
        policy: POLICY,
      }),
    );
    results = await runWorkers<StormResult>(WORKER, setups, together(200, 120_000), reaper);
  } finally {
    await origin?.close();
    for (let k = 1; k <= args.keys; k++) await dropId(valkey.admin, table, `${prefix}${k}`);
    await valkey.close();
    reaper.killAll();
  }
  const o = origin as Origin;
  const answers = new Map<string, Set<string>>();
  for (const r of results) {
    for (const [id, seen] of Object.entries(r.answers)) {
      const all = answers.get(id) ?? new Set<string>();
      for (const a of seen) all.add(a);
      answers.set(id, all);
    }
  }
  const distinctKeys = answers.size;
  const sourceReads = o.totalReads();
  const readsPerKey = [...answers.keys()].map((id) => o.readsOf(id));
  const keysReadTwice = readsPerKey.filter((n) => n > 1).length;
  const keysWithTwoAnswers = [...answers.values()].filter((s) => s.size > 1).length;
  const failures = results.reduce((n, r) => n + r.failures, 0);
  const errorCodes = {};
  const layers = {};
  for (const r of results) {
    addCounts(errorCodes, r.errorCodes);
    addCounts(layers, r.layers);
  }
  const ratio = distinctKeys === 0 ? Number.NaN : round(sourceReads / distinctKeys, 2);
  return {
    drill: 'storm',
    valkey: valkey.label,
    instances: args.instances,
    readsPerInstance: args.reads,
    keys: args.keys,
    zipf: args.zipf,
    concurrency: args.concurrency,
    sourceLatencyMs: args['latency-ms'],
    reads: args.instances * args.reads,
    distinctKeys,
    sourceReads,
    /** The law: 1.00. */
    sourceReadsPerKey: ratio,
    keysReadTwice,
    keysWithTwoAnswers,
    failures,
    errorCodes,
    layers,
    ...p50p99(results.flatMap((r) => r.latenciesMs)),
    slowestInstanceMs: Math.round(Math.max(0, ...results.map((r) => r.durationMs))),
    runtimeMs: Math.round(performance.now() - began),
    pass:
      distinctKeys > 0 &&
      sourceReads === distinctKeys &&
      keysReadTwice === 0 &&
      keysWithTwoAnswers === 0 &&
      failures === 0,
  };
}

type Report = Awaited<ReturnType<typeof main>>;

function render(r: Report): string {
  const table = columns([
    [
      'reads',
      `${r.reads} (${r.instances} instances × ${r.readsPerInstance}, ${r.concurrency} at a time each)`,
    ],
    ['distinct keys read', `${r.distinctKeys} of ${r.keys} (Zipf s = ${r.zipf})`],
    ['source reads (counted by the source)', r.sourceReads],
    ['source reads ÷ distinct keys', `${r.sourceReadsPerKey.toFixed(2)}   (law: 1.00)`],
    ['keys read from the source twice', `${r.keysReadTwice}   (law: 0)`],
    ['keys with two answers', `${r.keysWithTwoAnswers}   (law: 0)`],
    [
      'failed reads',
      `${r.failures === 0 ? 0 : `${r.failures} (${listCounts(r.errorCodes)})`}   (law: 0)`,
    ],
    ['answers by layer', listCounts(r.layers)],
    ['latency p50 / p99', `${r.p50Ms} / ${r.p99Ms} ms`],
    ['slowest instance', `${r.slowestInstanceMs} ms`],
  ]);
  return `storm drill: a cold Zipf storm, source latency ${r.sourceLatencyMs} ms, on ${r.valkey}\n${table}\n${r.pass ? 'PASS: one source read per key across the fleet' : 'FAIL: the storm law is broken'}\n`;
}

runDrill('storm', args.json, main, render);
