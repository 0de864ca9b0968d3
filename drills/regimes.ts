/**
 * Regimes drill: B cold readers in each of I processes fire at one id under coalescing
 * none / process / fleet → B·I, I and 1 source reads. Usage and laws: drills/README.md#regimes.
 */
import { randomBytes } from 'node:crypto';
import { type Origin, withOrigin } from '../harness/origin.js';
import { type Service, startServices } from '../harness/service.js';
import { drillArgs, fleetOptions, float, int, oneOf, runDrill } from './lib/cli.js';
import { addCounts, check, columns, listCounts, p50p99, sum } from './lib/report.js';
import { type DrillValkey, drillValkey, originConfig } from './lib/store.js';
import { runWorkers, together, workerFile } from './lib/workers.js';
import type { ReaderSetup, ReadsResult } from './reader-worker.js';

const args = drillArgs({
  instances: int(6, 1, 64),
  readers: int(200, 1, 10_000),
  'latency-ms': float(50, 0, 2_000),
  via: oneOf('inproc', 'http'),
  ...fleetOptions(),
});
const { via, instances, readers } = args;
const REGIMES = ['none', 'process', 'fleet'] as const;
const TIMEOUTS = { loadTimeoutMs: 4_000, leaseMs: 5_000, waitTimeoutMs: 5_000 };
const ADMISSION = { maxConcurrentLoads: readers, initialConcurrentLoads: readers };

/** Fires one burst per instance at one fresh id in the regime's table and judges it. */
async function runRegime(origin: Origin, valkey: DrillValkey, regime: (typeof REGIMES)[number]) {
  const table = `regimes-${regime}`;
  const id = `regimes-${Date.now()}-${randomBytes(6).toString('hex')}`;
  const policy = { coalescing: regime, ...TIMEOUTS, ...ADMISSION };
  let services: Service[] = [];
  let results: ReadsResult[];
  try {
    const setup = { kind: 'setup', table, id, reads: readers, lanes: readers } as const;
    const inproc = { ...setup, valkey: valkey.target, template: origin.template, policy };
    let setups: ReaderSetup[] = Array.from({ length: instances }, () => inproc);
    if (via === 'http') {
      const config = originConfig(valkey.section, table, origin.template, policy);
      services = await startServices(instances, config);
      setups = services.map((s) => ({ ...setup, serviceUrl: s.url }));
    }
    // Every instance fires at one wall-clock moment, 150 ms after `go`; longer than any reader
    // may lawfully take (a wait of 5 s plus a load of 4 s) for the results.
    const go = together(150, 30_000);
    results = await runWorkers<ReadsResult>(workerFile('reader-worker'), setups, go);
  } finally {
    await Promise.all(services.map((s) => s.stop()));
    await valkey.drop(table, [id]);
  }
  const expectedReads = { none: readers * instances, process: instances, fleet: 1 }[regime];
  const sourceReads = origin.readsOf(id);
  const distinctAnswers = new Set(results.flatMap((r) => r.answers[id] ?? [])).size;
  const failures = sum(results, (r) => r.failures);
  const failureCodes = results.reduce((c, r) => addCounts(c, r.errorCodes), {});
  const pass =
    sourceReads === expectedReads &&
    failures === 0 &&
    distinctAnswers >= 1 &&
    distinctAnswers <= expectedReads;
  const ms = results.flatMap((r) => r.latenciesMs);
  const counts = { expectedReads, sourceReads, distinctAnswers, failures, failureCodes };
  return { regime, ...counts, ...p50p99(ms, 1), pass };
}

runDrill('regimes', args.json, async () => {
  const valkey = await drillValkey(args.valkey, args.cluster, args.secure);
  const regimes: Array<Awaited<ReturnType<typeof runRegime>>> = [];
  try {
    await withOrigin([args['latency-ms']], async (origin) => {
      for (const regime of REGIMES) regimes.push(await runRegime(origin, valkey, regime));
    });
  } finally {
    await valkey.close();
  }
  const what = `${instances} instances × ${readers} concurrent cold readers, source latency ${args['latency-ms']} ms`;
  const rows = regimes.map((x) => [
    ...[x.regime, x.expectedReads, x.sourceReads, x.distinctAnswers],
    ...[x.failures === 0 ? '0' : `${x.failures} (${listCounts(x.failureCodes)})`, x.p50Ms, x.p99Ms],
  ]);
  const header = ['regime', 'expected reads', 'source reads', 'distinct answers', 'failures'];
  return {
    title: `regimes drill (${via}): ${what}, on ${valkey.label}`,
    body: [columns(rows, [...header, 'p50 ms', 'p99 ms'])],
    ...{ via, instances, readers, regimes },
    checks: regimes.map((r) =>
      check(
        `${r.regime}: source reads (counted by the source) = ${r.expectedReads}, distinct answers 1 to ${r.expectedReads}, no failed reader`,
        r.pass,
        `${r.sourceReads} source reads, ${r.distinctAnswers} distinct answers, ${r.failures} failed`,
      ),
    ),
  };
});
