/**
 * Regimes drill: B concurrent cold readers in each of I real processes, all at
 * one id at the same moment, in three coalescing regimes run one after another:
 *
 *   none     every miss loads                         → source reads B·I
 *   process  single-flight in each process            → source reads I
 *   fleet    single-flight + the Valkey lease         → source reads 1
 *
 *   npm run drill:regimes -- [--instances 6] [--readers 200] [--latency-ms 50]
 *     [--via inproc|http] [--json [file]] [--svg drills/out/regimes.svg]
 *
 * `inproc`: each instance is a forked `regimes-worker` holding its own store.
 * `http`: each instance is a real service (`dist/src/main.js`); a forked
 * worker per service fires the burst at it over HTTP.
 *
 * Needs a live Valkey/Redis at `--valkey` or `VALKEY_URL` (default
 * redis://127.0.0.1:6379). The source is an HTTP origin started here that
 * counts its own reads; the laws are judged by that count, never by the
 * cache's counters. Each regime uses its own table and a fresh id, so nothing
 * is warm. Exits 1 when a regime breaks its law, 2 when the drill cannot run.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { type Origin, startOrigin } from '../harness/origin.js';
import { leaseKey, valueKey } from '../src/store/keys.js';
import { drillArgs, emitJson } from './lib/args.js';
import { columns } from './lib/columns.js';
import { percentile } from './lib/report.js';
import { type Service, startService } from './lib/service.js';
import { barChartSvg } from './lib/svg.js';
import { spawnWorker, within } from './lib/workers.js';
import type { BurstResult, FromWorker, RegimePolicy, Setup, ToWorker } from './regimes-worker.js';

const args = drillArgs({
  instances: { type: 'string', default: '6' },
  readers: { type: 'string', default: '200' },
  'latency-ms': { type: 'string', default: '50' },
  via: { type: 'string', default: 'inproc' },
  svg: { type: 'string', default: 'drills/out/regimes.svg' },
  valkey: { type: 'string', default: process.env.VALKEY_URL ?? 'redis://127.0.0.1:6379' },
});

const WORKER = resolve(dirname(fileURLToPath(import.meta.url)), 'regimes-worker.js');
const REGIMES = ['none', 'process', 'fleet'] as const;
type Regime = (typeof REGIMES)[number];

/** Lead time between `go` and the burst, so every instance fires at the same wall-clock moment. */
const GO_LEAD_MS = 150;
const READY_TIMEOUT_MS = 20_000;
/** Longer than any reader can lawfully take: a wait (5 s) plus a load (4 s). */
const RESULT_TIMEOUT_MS = 30_000;
const EXIT_TIMEOUT_MS = 10_000;

interface Plan {
  via: 'inproc' | 'http';
  instances: number;
  readers: number;
  latencyMs: number;
  valkey: string;
}

interface RegimeReport {
  regime: Regime;
  table: string;
  id: string;
  expectedReads: number;
  sourceReads: number;
  distinctAnswers: number;
  /** The most distinct answers the law allows. */
  maxDistinctAnswers: number;
  failures: number;
  failureCodes: Record<string, number>;
  p50Ms: number;
  p99Ms: number;
  pass: boolean;
}

/** A forked worker and the promises of what it reports. */

/** Forks one worker per setup, starts them together, and gathers their bursts. */
async function burst(setups: Setup[]): Promise<BurstResult[]> {
  const workers = setups.map((setup) => spawnWorker<FromWorker>(WORKER, setup satisfies ToWorker));
  try {
    await within(Promise.all(workers.map((w) => w.ready)), READY_TIMEOUT_MS, 'workers ready');
    const go: ToWorker = { kind: 'go', atEpochMs: Date.now() + GO_LEAD_MS };
    for (const w of workers) w.child.send(go);
    const results = await within(
      Promise.all(workers.map((w) => w.result)),
      RESULT_TIMEOUT_MS,
      'workers burst',
    );
    await within(Promise.all(workers.map((w) => w.exited)), EXIT_TIMEOUT_MS, 'workers exit');
    return results;
  } finally {
    for (const w of workers) {
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    }
  }
}

/** Starts `count` services, or none: a failed start stops those that did start. */
async function startServices(count: number, config: object): Promise<Service[]> {
  const started = await Promise.allSettled(
    Array.from({ length: count }, () => startService(config)),
  );
  const services = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s) => s.status === 'rejected');
  if (failed !== undefined) {
    await Promise.all(services.map((s) => s.stop()));
    throw failed.reason;
  }
  return services;
}

async function runRegime(
  plan: Plan,
  origin: Origin,
  admin: Redis,
  regime: Regime,
): Promise<RegimeReport> {
  const table = `regimes-${regime}`;
  const id = `regimes-${Date.now()}-${randomBytes(6).toString('hex')}`;
  const keys = [valueKey(table, id), leaseKey(table, id)];
  const policy: RegimePolicy = {
    loadTimeoutMs: 4_000,
    leaseMs: 5_000,
    waitTimeoutMs: 5_000,
    maxConcurrentLoads: plan.readers,
  };
  const base = {
    kind: 'setup',
    via: plan.via,
    coalescing: regime,
    table,
    id,
    readers: plan.readers,
    policy,
    valkey: plan.valkey,
  } as const;
  await admin.del(...keys);
  let results: BurstResult[];
  try {
    if (plan.via === 'inproc') {
      results = await burst(
        Array.from({ length: plan.instances }, () => ({ ...base, template: origin.template })),
      );
    } else {
      const services = await startServices(plan.instances, {
        valkey: { url: plan.valkey },
        tables: {
          [table]: {
            source: { kind: 'http', url: origin.template, timeoutMs: 10_000 },
            coalescing: regime,
            ...policy,
          },
        },
      });
      try {
        results = await burst(services.map((s) => ({ ...base, serviceUrl: s.url })));
      } finally {
        await Promise.all(services.map((s) => s.stop()));
      }
    }
  } finally {
    await admin.del(...keys);
  }

  const { instances, readers } = plan;
  const expectedReads = { none: readers * instances, process: instances, fleet: 1 }[regime];
  const maxDistinctAnswers = { none: readers * instances, process: instances, fleet: 1 }[regime];
  const sourceReads = origin.readsOf(id);
  const latencies = results.flatMap((r) => r.latenciesMs);
  const distinctAnswers = new Set(results.flatMap((r) => r.answers)).size;
  const failures = results.reduce((n, r) => n + r.failures, 0);
  const failureCodes: Record<string, number> = {};
  for (const r of results) {
    for (const [code, n] of Object.entries(r.errorCodes))
      failureCodes[code] = (failureCodes[code] ?? 0) + n;
  }
  const pass =
    sourceReads === expectedReads &&
    failures === 0 &&
    distinctAnswers >= 1 &&
    distinctAnswers <= maxDistinctAnswers;
  return {
    regime,
    table,
    id,
    expectedReads,
    sourceReads,
    distinctAnswers,
    maxDistinctAnswers,
    failures,
    failureCodes,
    p50Ms: round(percentile(latencies, 50)),
    p99Ms: round(percentile(latencies, 99)),
    pass,
  };
}

function round(ms: number): number {
  return Number(ms.toFixed(1));
}

function positiveInt(name: string, text: string | undefined, max: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > max) {
    throw new Error(`--${name} must be an integer from 1 to ${max}`);
  }
  return n;
}

function render(plan: Plan, regimes: RegimeReport[], worstP99Ms: number, svg: string): string {
  const rows = regimes.map((r) => [
    r.regime,
    r.expectedReads,
    r.sourceReads,
    r.regime === 'fleet'
      ? `${r.distinctAnswers} (law: 1)`
      : `${r.distinctAnswers} (≤ ${r.maxDistinctAnswers})`,
    r.failures === 0
      ? '0'
      : `${r.failures} (${Object.entries(r.failureCodes)
          .map(([c, n]) => `${c}×${n}`)
          .join(', ')})`,
    r.p50Ms,
    r.p99Ms,
    r.pass ? 'PASS' : 'FAIL',
  ]);
  const broken = regimes.filter((r) => !r.pass).map((r) => r.regime);
  return [
    `regimes drill (${plan.via}): ${plan.instances} instances × ${plan.readers} concurrent cold readers, source latency ${plan.latencyMs} ms`,
    columns(
      [
        'regime',
        'expected reads',
        'source reads',
        'distinct answers',
        'failures',
        'p50 ms',
        'p99 ms',
        'result',
      ],
      rows,
    ),
    `  worst p99: ${worstP99Ms} ms`,
    `  chart: ${svg}`,
    broken.length === 0
      ? 'PASS: every regime keeps its law (source reads counted by the source)'
      : `FAIL: ${broken.join(', ')} broke ${broken.length === 1 ? 'its law' : 'their laws'}`,
    '',
  ].join('\n');
}

async function main(): Promise<number> {
  const via = args.via;
  if (via !== 'inproc' && via !== 'http') throw new Error('--via must be inproc or http');
  const latencyMs = Number(args['latency-ms']);
  if (!Number.isFinite(latencyMs) || latencyMs < 0 || latencyMs > 2_000) {
    throw new Error('--latency-ms must be a number from 0 to 2000');
  }
  const plan: Plan = {
    via,
    instances: positiveInt('instances', args.instances, 64),
    readers: positiveInt('readers', args.readers, 10_000),
    latencyMs,
    valkey: args.valkey as string,
  };
  const admin = new Redis(plan.valkey, {
    maxRetriesPerRequest: 1,
    connectTimeout: 3_000,
    lazyConnect: true,
  });
  admin.on('error', () => {});
  const origin = await startOrigin(latencyMs);
  const regimes: RegimeReport[] = [];
  try {
    await admin.connect().catch((err: unknown) => {
      throw new Error(`cannot reach Valkey at ${plan.valkey}`, { cause: err });
    });
    for (const regime of REGIMES) regimes.push(await runRegime(plan, origin, admin, regime));
  } finally {
    await origin.close();
    admin.disconnect();
  }

  const worstP99Ms = Math.max(...regimes.map((r) => (Number.isNaN(r.p99Ms) ? 0 : r.p99Ms)));
  const svgPath = resolve(args.svg as string);
  mkdirSync(dirname(svgPath), { recursive: true });
  writeFileSync(
    svgPath,
    barChartSvg({
      title: `Source reads per regime (${plan.via})`,
      subtitle: `${plan.instances} instances × ${plan.readers} cold readers on one id, source latency ${plan.latencyMs} ms; dashed line = expected`,
      yLabel: 'source reads, counted by the source',
      bars: regimes.map((r) => ({
        label: r.regime,
        value: r.sourceReads,
        expected: r.expectedReads,
        pass: r.pass,
      })),
    }),
  );
  const pass = regimes.every((r) => r.pass);
  const report = {
    drill: 'regimes',
    via: plan.via,
    instances: plan.instances,
    readersPerInstance: plan.readers,
    sourceLatencyMs: plan.latencyMs,
    regimes,
    worstP99Ms,
    svg: svgPath,
    pass,
  };
  if (!emitJson(args.json, report))
    process.stdout.write(render(plan, regimes, worstP99Ms, svgPath));
  return pass ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`regimes drill failed to run: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(2);
  },
);
