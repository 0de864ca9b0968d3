/**
 * Rolling-deploy drill: instance A of two is SIGTERMed and restarted on its port while a
 * readiness-honouring round-robin client keeps sending → zero requests lost, every answer 200, no id
 * read twice from the source. Usage and laws: drills/README.md#rolling.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Origin, startOrigin } from '../harness/origin.js';
import { type Service, startService } from '../harness/service.js';
import { drillArgs, int, runDrill, valkeyOption } from './lib/cli.js';
import { itemUrl, timed } from './lib/http.js';
import { Loops } from './lib/load.js';
import { Reaper } from './lib/reaper.js';
import { bump, columns, listCounts, p50p99 } from './lib/report.js';
import { connectAdmin, dropTable, originConfig } from './lib/store.js';

const args = drillArgs({
  loops: int(16, 1, 256),
  'pause-ms': int(5, 0, 1_000),
  'latency-ms': int(20, 0, 2_000),
  hot: int(50, 1, 10_000),
  'delay-ms': int(5_000, 0, 60_000),
  'probe-ms': int(100, 10, 5_000),
  valkey: valkeyOption(),
});

const TABLE = 'rolling';
const REQUEST_TIMEOUT_MS = 5_000;
const PHASE_MS = 2_000;

/** One instance as the client sees it: where it is, and whether its last probe said ready. */
interface Backend {
  label: string;
  url: string;
  ready: boolean;
}

/** One request as the client saw it. */
interface Sent {
  phase: string;
  backend: string;
  status: number;
  code: string | undefined;
  ms: number;
  at: number;
}

/**
 * The client: `--loops` request loops sharing one round-robin over the
 * backends whose last `/readyz` probe (every `--probe-ms`, each backend)
 * answered 200. It never sends to a backend that is not ready. Started.
 */
function roundRobin(backends: Backend[], ids: () => string): Loops<Sent> {
  let next = 0;
  const client: Loops<Sent> = new Loops({
    loops: args.loops,
    pauseMs: args['pause-ms'],
    async step(phase) {
      const ready = backends.filter((b) => b.ready);
      const b = ready[next++ % ready.length];
      if (b === undefined) return undefined;
      const at = performance.now();
      const r = await timed(itemUrl(b.url, TABLE, ids()), REQUEST_TIMEOUT_MS);
      return { phase, backend: b.label, status: r.status, code: r.code, ms: r.ms, at };
    },
  });
  client.phase = 'baseline';
  const probe = (b: Backend) => async () => {
    while (client.running) {
      const signal = AbortSignal.timeout(args['probe-ms']);
      b.ready = await fetch(`${b.url}/readyz`, { signal }).then(
        async (r) => {
          await r.body?.cancel();
          return r.status === 200;
        },
        () => false,
      );
      await sleep(args['probe-ms']);
    }
  };
  client.start(...backends.map(probe));
  return client;
}

async function main() {
  const reaper = new Reaper();
  const run = randomBytes(3).toString('hex');
  const hotIds = Array.from({ length: args.hot }, (_, i) => `hot-${run}-${i}`);
  let cold = 0;
  const requested = new Set<string>();
  const nextId = () => {
    const id =
      Math.random() < 0.8
        ? (hotIds[Math.floor(Math.random() * hotIds.length)] as string)
        : `cold-${run}-${cold++}`;
    requested.add(id);
    return id;
  };
  let origin: Origin | undefined;
  const services: Service[] = [];
  let client: Loops<Sent> | undefined;
  const admin = await connectAdmin(args.valkey);
  const t = {
    signalled: 0,
    notReadySeenMs: -1,
    lastAnswerByAMs: -1,
    exitedMs: -1,
    readyAgainMs: -1,
  };
  try {
    origin = await startOrigin(args['latency-ms']);
    // Each instance warms the hot ids before it says ready: from the origin
    // the first time (one read per id across the pair), from Valkey after the restart.
    const warm = { warm: { ids: hotIds } };
    const drain = { http: { shutdownDelayMs: args['delay-ms'] } };
    const config = originConfig({ url: args.valkey }, TABLE, origin.template, warm, drain);
    const started = await Promise.all([startService(config), startService(config)]);
    services.push(...started);
    for (const s of started) reaper.track(s.process);
    const [a, b] = started as [Service, Service];
    const port = Number(new URL(a.url).port);
    const backends: Backend[] = [
      { label: 'A', url: a.url, ready: true },
      { label: 'B', url: b.url, ready: true },
    ];
    const c = roundRobin(backends, nextId);
    client = c;
    await sleep(PHASE_MS);

    c.phase = 'drain';
    const exited = new Promise((ok) => a.process.once('exit', ok));
    t.signalled = performance.now();
    a.process.kill('SIGTERM');
    while (backends[0]?.ready) await sleep(5);
    t.notReadySeenMs = Math.round(performance.now() - t.signalled);
    await exited;
    t.exitedMs = Math.round(performance.now() - t.signalled);
    const byA = c.samples.filter((s) => s.backend === 'A' && s.at >= t.signalled);
    t.lastAnswerByAMs = Math.round(Math.max(-1, ...byA.map((s) => s.at + s.ms - t.signalled)));

    c.phase = 'restart';
    const again = await startService(config, { port });
    services[0] = again;
    reaper.track(again.process);
    while (!backends[0]?.ready) await sleep(5);
    t.readyAgainMs = Math.round(performance.now() - t.signalled);

    c.phase = 'after';
    await sleep(PHASE_MS);
    await c.stop();

    return report(c, origin, requested, hotIds, t);
  } finally {
    await client?.stop();
    await Promise.all(services.map((s) => s.stop(5_000)));
    await origin?.close();
    await dropTable(admin, TABLE);
    admin.disconnect();
    reaper.killAll();
  }
}

function report(
  client: Loops<Sent>,
  origin: Origin,
  requested: Set<string>,
  hotIds: string[],
  t: Record<
    'signalled' | 'notReadySeenMs' | 'lastAnswerByAMs' | 'exitedMs' | 'readyAgainMs',
    number
  >,
) {
  const phases = ['baseline', 'drain', 'restart', 'after'].map((phase) => {
    const s = client.samples.filter((x) => x.phase === phase);
    const codes: Record<string, number> = {};
    for (const x of s.filter((x) => x.status !== 200)) bump(codes, x.code ?? String(x.status));
    return {
      phase,
      sent: s.length,
      byA: s.filter((x) => x.backend === 'A').length,
      byB: s.filter((x) => x.backend === 'B').length,
      answered200: s.filter((x) => x.status === 200).length,
      answeredOther: s.filter((x) => x.status !== 200 && x.status !== 0).length,
      lost: s.filter((x) => x.status === 0).length,
      codes,
      ...p50p99(
        s.map((x) => x.ms),
        1,
      ),
    };
  });
  const total = (k: 'sent' | 'answered200' | 'answeredOther' | 'lost') =>
    phases.reduce((n, p) => n + p[k], 0);
  const maxReadsPerId = Math.max(0, ...[...requested].map((id) => origin.readsOf(id)));
  const drainedMs = t.lastAnswerByAMs;
  return {
    drill: 'rolling',
    loops: args.loops,
    sourceLatencyMs: args['latency-ms'],
    shutdownDelayMs: args['delay-ms'],
    probeMs: args['probe-ms'],
    phases,
    sent: total('sent'),
    answered200: total('answered200'),
    answeredOther: total('answeredOther'),
    lost: total('lost'),
    distinctIds: requested.size,
    sourceReads: origin.totalReads(),
    maxReadsPerId,
    hotIds: hotIds.length,
    hotSourceReads: hotIds.reduce((n, id) => n + origin.readsOf(id), 0),
    notReadySeenMs: t.notReadySeenMs,
    lastAnswerByAAfterSigtermMs: drainedMs,
    exitedAfterMs: t.exitedMs,
    readyAgainAfterMs: t.readyAgainMs,
    pass:
      total('lost') === 0 &&
      total('answeredOther') === 0 &&
      maxReadsPerId <= 1 &&
      t.exitedMs >= args['delay-ms'],
  };
}

function render(r: Awaited<ReturnType<typeof main>>): string {
  const table = columns(
    r.phases.map((p) => [
      p.phase,
      p.sent,
      p.byA,
      p.byB,
      p.answered200,
      p.answeredOther,
      p.lost,
      listCounts(p.codes, '-'),
      p.p50Ms,
      p.p99Ms,
    ]),
    ['phase', 'sent', 'to A', 'to B', '200', 'other', 'lost', 'codes', 'p50 ms', 'p99 ms'],
  );
  const facts = columns([
    [
      'requests sent / answered 200 / lost',
      `${r.sent} / ${r.answered200} / ${r.lost}   (law: 0 lost, all 200)`,
    ],
    [
      'client saw A not ready after SIGTERM',
      `${r.notReadySeenMs} ms   (probe every ${r.probeMs} ms)`,
    ],
    ['A answered its last request after SIGTERM at', `${r.lastAnswerByAAfterSigtermMs} ms`],
    [
      'A exited after SIGTERM',
      `${r.exitedAfterMs} ms   (law: ≥ shutdownDelayMs ${r.shutdownDelayMs})`,
    ],
    ['A ready again (warmed) after SIGTERM', `${r.readyAgainAfterMs} ms`],
    [
      'source reads / distinct ids',
      `${r.sourceReads} / ${r.distinctIds}   (most reads of one id: ${r.maxReadsPerId}, law: ≤ 1)`,
    ],
    [
      'source reads of the hot ids (warmed by both, twice by A)',
      `${r.hotSourceReads} for ${r.hotIds} ids   (one each: the restart warmed A from Valkey)`,
    ],
  ]);
  return `rolling drill: 2 instances, ${r.loops} loops round-robin over the ready ones; A SIGTERMed and restarted\n${table}\n\n${facts}\n${r.pass ? 'PASS' : 'FAIL'}: ${r.pass ? 'no request lost through the restart' : 'the rolling-deploy law is broken'}\n`;
}

runDrill('rolling', args.json, main, render);
