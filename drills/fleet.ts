/**
 * Fleet drill: three behaviours of a fleet of real service processes, each
 * judged by what the source (the origin started here) counted.
 *
 *   npm run drill:fleet -- [--scenario all|skew|holder|admission] [--json [file]]
 *
 * - **skew**: three instances on one Valkey, one host's clock ten minutes
 *   ahead and one ten minutes behind (a `--import` preload). Each fills keys
 *   the others read. Law: source reads = distinct keys; no served
 *   `Cache-Status` ttl above ttlMs × (1 + jitter); after the TTL no host
 *   answers the old value.
 * - **holder**: three instances, default policy. The holder of a lease is
 *   SIGKILLed 0.3 s into a 2 s load; the other two get 100 readers of that id;
 *   the takeover load takes 300 ms. Law: 2 source reads, 100 × 200, p99 ≤ 3 s.
 * - **admission**: one fresh instance, default policy. 400 concurrent GETs of
 *   distinct cold ids on a healthy source (20 ms): law 0 shed. The source
 *   slows to 500 ms, a trickle of reads lets the instance see it, then the
 *   same burst: the excess is shed fast (p99 of the shed at most 50 ms above
 *   the p99 of the same 400 GETs answered from L1, measured in the same run:
 *   what the HTTP transport alone costs on this machine), and the source
 *   never sees more loads at once than `maxConcurrentLoads`.
 *
 * Needs a live Valkey/Redis at `--valkey` or `VALKEY_URL`. Exits 1 when a law
 * does not hold, 2 when the drill could not run.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { HOLD_PREFIX, type Origin, startOrigin } from '../harness/origin.js';
import { type Service, SKEW_CLOCK, startService } from '../harness/service.js';
import { drillArgs, oneOf, runDrill, valkeyOption } from './lib/cli.js';
import { itemUrl, timedGet } from './lib/http.js';
import { metric, scrape } from './lib/metrics.js';
import { columns, p50p99 } from './lib/report.js';

const args = drillArgs({
  scenario: oneOf('all', 'skew', 'holder', 'admission'),
  valkey: valkeyOption(),
});

const run = randomBytes(3).toString('hex');

function config(origin: Origin, table: string, policy: object = {}) {
  return {
    valkey: { url: args.valkey },
    log: { level: 'error' },
    tables: { [table]: { source: { kind: 'http', url: origin.template }, ...policy } },
  };
}

/** What one GET showed: status, the origin's read number, and Cache-Status. */
async function get(s: Service, table: string, id: string, timeoutMs = 10_000) {
  const t = await timedGet(itemUrl(s.url, table, id), timeoutMs);
  const body = t.status === 200 ? (JSON.parse(t.body) as { read: number }) : undefined;
  return { ...t, read: body?.read };
}

async function withServices<T>(
  starts: Array<Promise<Service>>,
  body: (s: Service[]) => Promise<T>,
): Promise<T> {
  const settled = await Promise.allSettled(starts);
  const services = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  try {
    const failed = settled.find((r) => r.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    return await body(services);
  } finally {
    await Promise.all(services.map((s) => s.stop()));
  }
}

async function skew() {
  const table = `skew-${run}`;
  const ttlMs = 2_000;
  const jitter = 0.2;
  const keysPerHost = 20;
  const origin = await startOrigin(5);
  const cfg = config(origin, table, { ttlMs, jitter, staleMs: 0, earlyRefreshBeta: 0 });
  const skewed = (ms: number) => ({
    nodeArgs: ['--import', SKEW_CLOCK],
    env: { SKEW_MS: String(ms) },
  });
  try {
    return await withServices(
      [startService(cfg), startService(cfg, skewed(600_000)), startService(cfg, skewed(-600_000))],
      async (hosts) => {
        let maxTtlS = Number.NEGATIVE_INFINITY;
        let failures = 0;
        for (const [h, host] of hosts.entries()) {
          for (let k = 0; k < keysPerHost; k++) {
            const id = `h${h}-k${k}`;
            for (const reader of [host, ...hosts.filter((x) => x !== host)]) {
              const r = await get(reader, table, id);
              if (r.status !== 200) failures++;
              const ttl = /ttl=(-?\d+)/.exec(r.cacheStatus ?? '')?.[1];
              if (ttl !== undefined) maxTtlS = Math.max(maxTtlS, Number(ttl));
            }
          }
        }
        const distinctKeys = hosts.length * keysPerHost;
        const readsWhileFresh = origin.totalReads();
        await sleep(ttlMs * (1 + jitter) + 300);
        let servedExpired = 0;
        for (const host of hosts) {
          for (let k = 0; k < 5; k++) {
            const r = await get(host, table, `h0-k${k}`);
            if (r.read === 1) servedExpired++;
          }
        }
        const boundS = Math.trunc((ttlMs * (1 + jitter)) / 1000);
        return {
          hosts: 'clock right, +10 min, -10 min',
          distinctKeys,
          sourceReads: readsWhileFresh,
          maxServedTtlS: maxTtlS,
          ttlBoundS: boundS,
          servedAfterExpiry: servedExpired,
          failures,
          pass:
            readsWhileFresh === distinctKeys &&
            maxTtlS <= boundS &&
            servedExpired === 0 &&
            failures === 0,
        };
      },
    );
  } finally {
    await origin.close();
  }
}

async function holder() {
  const table = `holder-${run}`;
  const id = `${HOLD_PREFIX}${run}`;
  const loadMs = 300;
  // The first read is held 1.7 s, then answers after loadMs: a 2 s load. The holder dies before.
  const origin = await startOrigin(loadMs, 2_000 - loadMs);
  try {
    return await withServices(
      [0, 1, 2].map(() => startService(config(origin, table))),
      async ([a, b, c]) => {
        if (a === undefined || b === undefined || c === undefined) throw new Error('no services');
        void get(a, table, id).catch(() => {});
        if (!(await origin.seen(id, 5_000))) throw new Error('the holder never reached the source');
        await sleep(300);
        a.process.kill('SIGKILL');
        origin.release(id); // reads from now on answer after loadMs: the takeover load
        const readers = Array.from({ length: 100 }, (_, i) => get(i % 2 === 0 ? b : c, table, id));
        const results = await Promise.all(readers);
        const ok = results.filter((r) => r.status === 200).length;
        const answers = new Set(results.map((r) => r.read)).size;
        const { p50Ms, p99Ms } = p50p99(
          results.map((r) => r.ms),
          0,
        );
        const sourceReads = origin.readsOf(id);
        const codes = results.filter((r) => r.status !== 200).map((r) => r.code);
        return {
          readers: results.length,
          answered200: ok,
          otherCodes: [...new Set(codes)].join(', ') || '-',
          distinctAnswers: answers,
          sourceReads,
          p50Ms,
          p99Ms,
          pass: sourceReads === 2 && ok === 100 && answers === 1 && p99Ms <= 3_000,
        };
      },
    );
  } finally {
    await origin.close();
  }
}

async function burst(s: Service, table: string, prefix: string, n: number) {
  const results = await Promise.all(
    Array.from({ length: n }, (_, i) => get(s, table, `${prefix}-${i}`, 15_000)),
  );
  const all = p50p99(
    results.map((r) => r.ms),
    0,
  );
  const shed = results.filter((r) => r.code === 'ECC_SHED');
  const other = results.filter((r) => r.status !== 200 && r.code !== 'ECC_SHED');
  return {
    ok: results.filter((r) => r.status === 200).length,
    shed: shed.length,
    other: other.length,
    shedP99Ms:
      shed.length === 0
        ? 0
        : p50p99(
            shed.map((r) => r.ms),
            0,
          ).p99Ms,
    okP99Ms: p50p99(
      results.filter((r) => r.status === 200).map((r) => r.ms),
      0,
    ).p99Ms,
    allP99Ms: all.p99Ms,
  };
}

async function admission() {
  const table = `admit-${run}`;
  const origin = await startOrigin(20);
  try {
    return await withServices([startService(config(origin, table))], async ([s]) => {
      if (s === undefined) throw new Error('no service');
      const limitNow = async () =>
        metric(await scrape(s.url), 'echostore_load_limit', { table }) ?? Number.NaN;
      const healthy = await burst(s, table, 'healthy', 400);
      const healthyPeak = origin.peakInFlight();
      // The same burst again, answered from L1: what 400 concurrent requests cost this machine
      // over HTTP alone. A shed is "fast" when it costs at most 50 ms more than that.
      const transport = await burst(s, table, 'healthy', 400);
      origin.setLatency(500);
      origin.resetPeak();
      // A trickle that lets the instance see the slowdown (16 at a time, twice).
      let lowestLimit = await limitNow();
      for (let wave = 0; wave < 2; wave++) {
        await burst(s, table, `trickle-${wave}`, 16);
        lowestLimit = Math.min(lowestLimit, await limitNow());
      }
      const slow = await burst(s, table, 'slow', 400);
      const slowPeak = origin.peakInFlight();
      const maxConcurrentLoads = 16;
      return {
        healthy: { ...healthy, sourcePeak: healthyPeak },
        slow: { ...slow, sourcePeak: slowPeak, lowestLimit },
        l1BurstP99Ms: transport.allP99Ms,
        shedOverTransportMs: slow.shedP99Ms - transport.allP99Ms,
        maxConcurrentLoads,
        pass:
          healthy.shed === 0 &&
          healthy.other === 0 &&
          healthy.ok === 400 &&
          healthyPeak <= maxConcurrentLoads &&
          slow.shed > 0 &&
          slow.other === 0 &&
          slow.shedP99Ms - transport.allP99Ms <= 50 &&
          slowPeak <= maxConcurrentLoads,
      };
    });
  } finally {
    await origin.close();
  }
}

async function main() {
  const want = (s: string) => args.scenario === 'all' || args.scenario === s;
  const report = {
    drill: 'fleet',
    skew: want('skew') ? await skew() : undefined,
    holder: want('holder') ? await holder() : undefined,
    admission: want('admission') ? await admission() : undefined,
    pass: true,
  };
  report.pass = [report.skew, report.holder, report.admission].every(
    (r) => r === undefined || r.pass,
  );
  return report;
}

function render(r: Awaited<ReturnType<typeof main>>): string {
  const out: string[] = [];
  const verdict = (pass: boolean) => (pass ? 'PASS' : 'FAIL');
  if (r.skew !== undefined) {
    const s = r.skew;
    out.push(
      `skew: 3 instances (${s.hosts}) on one Valkey, ttlMs 2000, jitter 0.2`,
      columns([
        [
          'source reads (counted by the source)',
          `${s.sourceReads}   (law: ${s.distinctKeys}, one per key)`,
        ],
        ['largest Cache-Status ttl served', `${s.maxServedTtlS} s   (law: ≤ ${s.ttlBoundS})`],
        ['old values answered after the TTL', `${s.servedAfterExpiry}   (law: 0)`],
        ['failed reads', `${s.failures}   (law: 0)`],
      ]),
      `${verdict(s.pass)}: one clock for the fleet`,
    );
  }
  if (r.holder !== undefined) {
    const h = r.holder;
    out.push(
      'holder: 3 instances, default policy; the lease holder SIGKILLed 0.3 s into a 2 s load; 100 readers on the other two; takeover load 300 ms',
      columns([
        ['source reads (counted by the source)', `${h.sourceReads}   (law: 2)`],
        ['answered 200', `${h.answered200} of ${h.readers}   (law: all)`],
        ['other answers', h.otherCodes],
        ['distinct answers', `${h.distinctAnswers}   (law: 1)`],
        ['latency p50 / p99', `${h.p50Ms} / ${h.p99Ms} ms   (law: p99 ≤ 3000)`],
      ]),
      `${verdict(h.pass)}: a dead holder costs one source read, every waiter answered`,
    );
  }
  if (r.admission !== undefined) {
    const a = r.admission;
    out.push(
      `admission: 1 instance, default policy (maxConcurrentLoads ${a.maxConcurrentLoads}), 400 concurrent GETs of distinct cold ids`,
      columns(
        [
          [
            'healthy (20 ms)',
            a.healthy.ok,
            a.healthy.shed,
            a.healthy.other,
            a.healthy.shedP99Ms,
            a.healthy.okP99Ms,
            a.healthy.sourcePeak,
            '-',
          ],
          [
            'slowed (500 ms)',
            a.slow.ok,
            a.slow.shed,
            a.slow.other,
            a.slow.shedP99Ms,
            a.slow.okP99Ms,
            a.slow.sourcePeak,
            a.slow.lowestLimit,
          ],
        ],
        [
          'source',
          '200',
          'shed',
          'other',
          'shed p99 ms',
          '200 p99 ms',
          'source peak',
          'lowest limit',
        ],
      ),
      `  the same 400 GETs answered from L1 (HTTP alone): p99 ${a.l1BurstP99Ms} ms; the shed p99 exceeds it by ${a.shedOverTransportMs} ms`,
      `  laws: healthy → 0 shed; slowed → shed p99 ≤ L1 p99 + 50 ms; source peak ≤ ${a.maxConcurrentLoads} (counted by the source)`,
      `${verdict(a.pass)}: a healthy source is never shed, a slow one sheds the excess fast`,
    );
  }
  out.push(r.pass ? 'PASS: every fleet law holds' : 'FAIL: a fleet law is broken');
  return `${out.join('\n')}\n`;
}

runDrill('fleet', args.json, main, render);
