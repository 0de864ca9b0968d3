/**
 * Rolling-deploy drill: instance A of two is SIGTERMed and restarted on its port while a
 * readiness-honouring round-robin client keeps sending → zero requests lost, every answer 200, no id
 * read twice from the source. Usage and laws: drills/README.md#rolling.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { withOrigin } from '../harness/origin.js';
import { type Service, startService, startServices } from '../harness/service.js';
import { drillArgs, int, runDrill, valkeyOption } from './lib/cli.js';
import { itemUrl, timed } from './lib/http.js';
import { Loops, pick, summarize } from './lib/load.js';
import { columns, law, listCounts, sum } from './lib/report.js';
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
const PHASE_MS = 2_000;

runDrill('rolling', args.json, async () => {
  const run = randomBytes(3).toString('hex');
  const hotIds = Array.from({ length: args.hot }, (_, i) => `hot-${run}-${i}`);
  let cold = 0;
  const requested = new Set<string>();
  const admin = await connectAdmin(args.valkey);
  const services: Service[] = [];
  const backends = ['A', 'B'].map((label) => ({ label, url: '', ready: true }));
  let next = 0;
  const client = new Loops({
    loops: args.loops,
    pauseMs: args['pause-ms'],
    // One round-robin over the backends whose last `/readyz` probe answered 200: it never
    // sends to a backend that is not ready.
    async step(phase) {
      const ready = backends.filter((b) => b.ready);
      const b = ready[next++ % ready.length];
      if (b === undefined) return undefined;
      const id = Math.random() < 0.8 ? (pick(hotIds) as string) : `cold-${run}-${cold++}`;
      requested.add(id);
      const at = performance.now();
      const { body: _, ...r } = await timed(itemUrl(b.url, TABLE, id), 5_000);
      return { phase, backend: b.label, at, ...r };
    },
  });
  const probe = (b: (typeof backends)[number]) => async () => {
    while (client.running) {
      const signal = AbortSignal.timeout(args['probe-ms']);
      const r = await fetch(`${b.url}/readyz`, { signal }).catch(() => undefined);
      await r?.body?.cancel();
      b.ready = r?.status === 200;
      await sleep(args['probe-ms']);
    }
  };
  try {
    return await withOrigin([args['latency-ms']], async (origin) => {
      // Each instance warms the hot ids before it says ready: from the origin the first time
      // (one read per id across the pair), from Valkey after the restart.
      const warm = { warm: { ids: hotIds } };
      const drain = { http: { shutdownDelayMs: args['delay-ms'] } };
      const config = originConfig({ url: args.valkey }, TABLE, origin.template, warm, drain);
      services.push(...(await startServices(2, config)));
      const a = services[0] as Service;
      for (const [i, s] of services.entries()) (backends[i] as { url: string }).url = s.url;
      client.phase = 'baseline';
      client.start(...backends.map(probe));
      await sleep(PHASE_MS);

      client.phase = 'drain';
      const exited = new Promise((ok) => a.process.once('exit', ok));
      const signalled = performance.now();
      const since = () => Math.round(performance.now() - signalled);
      a.process.kill('SIGTERM');
      while (backends[0]?.ready) await sleep(5);
      const notReadySeenMs = since();
      await exited;
      const exitedMs = since();
      const byA = client.samples.filter((s) => s.backend === 'A' && s.at >= signalled);
      const lastAnswerByAMs = Math.round(Math.max(-1, ...byA.map((s) => s.at + s.ms - signalled)));

      client.phase = 'restart';
      services[0] = await startService(config, { port: Number(new URL(a.url).port) });
      while (!backends[0]?.ready) await sleep(5);
      const readyAgainMs = since();
      client.phase = 'after';
      await sleep(PHASE_MS);
      await client.stop();

      const phases = ['baseline', 'drain', 'restart', 'after'].map((phase) => {
        const s = client.samples.filter((x) => x.phase === phase);
        const to = (label: string) => s.filter((x) => x.backend === label).length;
        return { phase, ...summarize(s), toA: to('A'), toB: to('B') };
      });
      const total = (k: 'requests' | 'answered200' | 'answeredOther' | 'lost') =>
        sum(phases, (p) => p[k]);
      const readsPerId = Math.max(0, ...[...requested].map((id) => origin.readsOf(id)));
      const hotSourceReads = sum(hotIds, (id) => origin.readsOf(id));
      const delay = args['delay-ms'];
      const rows = phases.map((p) => [
        ...[p.phase, p.requests, p.toA, p.toB, p.answered200, p.answeredOther, p.lost],
        ...[listCounts(p.failed, '-'), p.p50Ms, p.p99Ms],
      ]);
      const header = ['phase', 'sent', 'to A', 'to B', '200', 'other', 'lost', 'codes'];
      return {
        title: `rolling drill: 2 instances, ${args.loops} loops round-robin over the ready ones; A SIGTERMed and restarted`,
        body: [columns(rows, [...header, 'p50 ms', 'p99 ms'])],
        figures: {
          'client saw A not ready after SIGTERM': `${notReadySeenMs} ms   (probe every ${args['probe-ms']} ms)`,
          'A answered its last request after SIGTERM at': `${lastAnswerByAMs} ms`,
          'A ready again (warmed) after SIGTERM': `${readyAgainMs} ms`,
          'source reads / distinct ids': `${origin.totalReads()} / ${requested.size}`,
          'source reads of the hot ids (warmed by both, twice by A)': `${hotSourceReads} for ${hotIds.length} ids   (one each: the restart warmed A from Valkey)`,
        },
        phases,
        checks: [
          law('requests lost', `${total('lost')} of ${total('requests')}`, 0, total('lost') === 0),
          law('requests answered other than 200', total('answeredOther'), 0),
          law('most source reads of one id', readsPerId, '≤ 1', readsPerId <= 1),
          law(
            'A exited after SIGTERM',
            `${exitedMs} ms`,
            `≥ shutdownDelayMs ${delay}`,
            exitedMs >= delay,
          ),
        ],
      };
    });
  } finally {
    await client.stop();
    await Promise.all(services.map((s) => s.stop(5_000)));
    await dropTable(admin, TABLE);
    admin.disconnect();
  }
});
