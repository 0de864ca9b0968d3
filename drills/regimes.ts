/**
 * Regimes drill: B cold readers in each of I processes fire at one id under coalescing
 * none / process / fleet → B·I, I and 1 source reads. Usage and laws: drills/README.md#regimes.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Origin, withOrigin } from '../harness/origin.js';
import { type Service, startServices } from '../harness/service.js';
import type { BurstResult } from './lib/burst.js';
import { drillArgs, flag, float, int, oneOf, runDrill, text, valkeyOption } from './lib/cli.js';
import { addCounts, columns, listCounts, p50p99 } from './lib/report.js';
import { dropId } from './lib/store.js';
import { barChartSvg } from './lib/svg.js';
import { type DrillValkey, drillValkey } from './lib/valkey-target.js';
import { runWorkers, together } from './lib/workers.js';
import type { RegimePolicy, Setup } from './regimes-worker.js';

const args = drillArgs({
  instances: int(6, 1, 64),
  readers: int(200, 1, 10_000),
  'latency-ms': float(50, 0, 2_000),
  via: oneOf('inproc', 'http'),
  svg: text('drills/out/regimes.svg'),
  valkey: valkeyOption(),
  cluster: flag(),
  secure: flag(),
});

const WORKER = resolve(dirname(fileURLToPath(import.meta.url)), 'regimes-worker.js');
const REGIMES = ['none', 'process', 'fleet'] as const;
type Regime = (typeof REGIMES)[number];

/** Longer than any reader can lawfully take: a wait (5 s) plus a load (4 s). */
const RESULT_TIMEOUT_MS = 30_000;
const POLICY: RegimePolicy = {
  loadTimeoutMs: 4_000,
  leaseMs: 5_000,
  waitTimeoutMs: 5_000,
  maxConcurrentLoads: args.readers,
  initialConcurrentLoads: args.readers,
};

/** Fires one burst per instance at one fresh id in the regime's table and judges it. */
async function runRegime(origin: Origin, valkey: DrillValkey, regime: Regime) {
  const { via, instances, readers } = args;
  const { admin } = valkey;
  const table = `regimes-${regime}`;
  const id = `regimes-${Date.now()}-${randomBytes(6).toString('hex')}`;
  let services: Service[] = [];
  let results: BurstResult[];
  await dropId(admin, table, id);
  try {
    if (via === 'http') {
      const source = { kind: 'http', url: origin.template, timeoutMs: 10_000 };
      services = await startServices(instances, {
        valkey: valkey.section,
        tables: { [table]: { source, coalescing: regime, ...POLICY } },
      });
    }
    const { template } = origin;
    const setup = (serviceUrl?: string): Setup => {
      const base = { kind: 'setup', via, table, id, readers, template } as const;
      return { ...base, valkey: valkey.target, serviceUrl, coalescing: regime, policy: POLICY };
    };
    const setups =
      via === 'http'
        ? services.map((s) => setup(s.url))
        : Array.from({ length: instances }, () => setup());
    // Every instance fires at one wall-clock moment, 150 ms after `go`.
    results = await runWorkers<BurstResult>(WORKER, setups, together(150, RESULT_TIMEOUT_MS));
  } finally {
    await Promise.all(services.map((s) => s.stop()));
    await dropId(admin, table, id);
  }

  const expectedReads = { none: readers * instances, process: instances, fleet: 1 }[regime];
  const sourceReads = origin.readsOf(id);
  const distinctAnswers = new Set(results.flatMap((r) => r.answers)).size;
  const failures = results.reduce((n, r) => n + r.failures, 0);
  const failureCodes = {};
  for (const r of results) addCounts(failureCodes, r.errorCodes);
  return {
    regime,
    table,
    id,
    /** The law: exactly this many source reads, counted by the origin. */
    expectedReads,
    sourceReads,
    distinctAnswers,
    /** The most distinct answers the law allows. */
    maxDistinctAnswers: expectedReads,
    failures,
    failureCodes,
    ...p50p99(
      results.flatMap((r) => r.latenciesMs),
      1,
    ),
    pass:
      sourceReads === expectedReads &&
      failures === 0 &&
      distinctAnswers >= 1 &&
      distinctAnswers <= expectedReads,
  };
}

async function main() {
  const valkey = await drillValkey(args.valkey, args.cluster, args.secure);
  const regimes: Array<Awaited<ReturnType<typeof runRegime>>> = [];
  try {
    await withOrigin([args['latency-ms']], async (origin) => {
      for (const regime of REGIMES) regimes.push(await runRegime(origin, valkey, regime));
    });
  } finally {
    await valkey.close();
  }
  const report = {
    drill: 'regimes',
    via: args.via,
    valkey: valkey.label,
    instances: args.instances,
    readersPerInstance: args.readers,
    sourceLatencyMs: args['latency-ms'],
    regimes,
    worstP99Ms: Math.max(...regimes.map((r) => (Number.isNaN(r.p99Ms) ? 0 : r.p99Ms))),
    svg: resolve(args.svg),
    pass: regimes.every((r) => r.pass),
  };
  mkdirSync(dirname(report.svg), { recursive: true });
  writeFileSync(
    report.svg,
    barChartSvg(
      `Source reads per regime (${report.via})`,
      `${report.instances} instances × ${report.readersPerInstance} cold readers on one id, source latency ${report.sourceLatencyMs} ms; dashed line = expected`,
      'source reads, counted by the source',
      regimes.map((r) => ({
        label: r.regime,
        value: r.sourceReads,
        expected: r.expectedReads,
        pass: r.pass,
      })),
    ),
  );
  return report;
}

type Report = Awaited<ReturnType<typeof main>>;

function render(r: Report): string {
  const rows = r.regimes.map((x) => [
    x.regime,
    x.expectedReads,
    x.sourceReads,
    `${x.distinctAnswers} (${x.regime === 'fleet' ? 'law: 1' : `≤ ${x.maxDistinctAnswers}`})`,
    x.failures === 0 ? '0' : `${x.failures} (${listCounts(x.failureCodes)})`,
    x.p50Ms,
    x.p99Ms,
    x.pass ? 'PASS' : 'FAIL',
  ]);
  const broken = r.regimes.filter((x) => !x.pass).map((x) => x.regime);
  const header = ['regime', 'expected reads', 'source reads', 'distinct answers', 'failures'];
  return [
    `regimes drill (${r.via}): ${r.instances} instances × ${r.readersPerInstance} concurrent cold readers, source latency ${r.sourceLatencyMs} ms, on ${r.valkey}`,
    columns(rows, [...header, 'p50 ms', 'p99 ms', 'result']),
    `  worst p99: ${r.worstP99Ms} ms`,
    `  chart: ${r.svg}`,
    broken.length === 0
      ? 'PASS: every regime keeps its law (source reads counted by the source)'
      : `FAIL: ${broken.join(', ')} broke ${broken.length === 1 ? 'its law' : 'their laws'}`,
    '',
  ].join('\n');
}

runDrill('regimes', args.json, main, render);
