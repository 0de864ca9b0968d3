/**
 * Expiry drill: one hot key read back to back by every instance while its soft TTL runs out
 * → at most one source read per expiry, and (stale on) no reader waits on the loader. The parent
 * warms the key; the workers read until (expiries + 0.5) × ttlMs after that fill. Usage and laws:
 * drills/README.md#expiry.
 */
import { randomBytes } from 'node:crypto';
import { type StampedRead, startOrigin } from '../harness/origin.js';
import type { ExpiryGo, Setup, WorkerResult } from './expiry-worker.js';
import { drillArgs, float, int, runDrill, valkeyOption } from './lib/cli.js';
import { addCounts, bump, check, columns, countBy, law, sum } from './lib/report.js';
import { drillValkey, originStore } from './lib/store.js';
import { runWorkers, workerFile } from './lib/workers.js';

const args = drillArgs({
  instances: int(3, 2, 16),
  clients: int(50, 1, 1_000),
  expiries: int(4, 1, 20),
  'ttl-ms': int(1500, 200, 60_000),
  'stale-ms': int(3000, 0, 600_000),
  beta: float(0, 0, 100),
  'latency-ms': int(100, 1, 2_000),
  'pause-ms': int(1, 0, 1_000),
  valkey: valkeyOption(),
});
const [ttlMs, staleMs, latencyMs] = [args['ttl-ms'], args['stale-ms'], args['latency-ms']];
const TABLE = 'expiry';
const POLICY = {
  ...{ ttlMs, staleMs, jitter: 0, earlyRefreshBeta: args.beta },
  l1: { ttlMs: 60_000 },
};

/**
 * Judges the run, one row per expiry: a value is a *generation*, the origin's read number `n`
 * that produced it; source read `n` refreshed the newest generation answered before it arrived.
 * `t0Ms` is the warm-up fill (the first source read's answer), `stopAtMs` when the clients
 * stopped, both epoch ms.
 */
function judge(reads: StampedRead[], workers: WorkerResult[], t0Ms: number, stopAtMs: number) {
  const answered = (r: StampedRead) => r.answeredAtMs ?? r.arrivedAtMs + latencyMs;
  // The newest generation answered at or before `atMs`.
  const currentAt = (atMs: number) =>
    reads.reduce((gen, r) => (answered(r) <= atMs && r.n > gen ? r.n : gen), 1);
  const replaces = new Map<number, number>();
  for (const r of reads) if (r.n > 1) replaces.set(r.n, currentAt(r.arrivedAtMs));
  // A read that waited for generation g waited for the refresh of the one g replaced;
  // a failed one is placed by when it started.
  const waitedFor = countBy(
    workers.flatMap((w) => w.waitedReads),
    (s) => String(s.gen > 0 ? (replaces.get(s.gen) ?? 0) : currentAt(s.atMs)),
  );
  const rows = [];
  for (const read of reads) {
    const gen = read.n;
    // Its soft expiry as its first reader saw it; as the origin answered it if no reader did.
    const seen = workers.flatMap((w) => w.generations.filter((g) => g.gen === gen));
    const soft =
      seen.length > 0 ? Math.min(...seen.map((g) => g.softAtMs)) : answered(read) + ttlMs;
    const refreshedBy = reads.filter((x) => replaces.get(x.n) === gen);
    if (soft >= stopAtMs && refreshedBy.length === 0) continue;
    const first = refreshedBy[0];
    const lastStale = Math.max(...seen.map((g) => g.lastStaleAtMs ?? Number.NEGATIVE_INFINITY));
    const sourceReads = refreshedBy.length;
    const waited = waitedFor[gen] ?? 0;
    const superseded = sourceReads === 0 && reads.some((x) => x.n > gen && answered(x) <= soft);
    const never = sourceReads === 0 && !superseded && stopAtMs - soft > 2 * latencyMs;
    const why = [
      ...(sourceReads > 1 ? [`${sourceReads} source reads`] : []),
      ...(superseded ? ['superseded'] : never ? ['never refreshed'] : []),
      ...(waited > 0 && staleMs > 0 ? [`${waited} waited`] : []),
    ];
    const ms = (x: number | undefined) => (x === undefined ? undefined : Math.round(x - soft));
    rows.push({
      expiry: rows.length + 1,
      /** The generation that expired (origin read number), and its soft expiry after the warm-up fill. */
      gen,
      softAtMs: Math.round(soft - t0Ms),
      /** Source reads that replaced it (goal 1), counted by the origin. */
      sourceReads,
      /** The first of them at the origin, and its answer, ms relative to the soft expiry. */
      refreshReadAtMs: ms(first?.arrivedAtMs),
      newValueAtMs: ms(first && answered(first)),
      /** Reads that waited on the loader for the value replacing it (goal 0 with stale on). */
      waited,
      /** Reads answered with it after its soft expiry, and the last of them. */
      staleServed: sum(seen, (g) => g.stale),
      staleForMs: Number.isFinite(lastStale) ? ms(lastStale) : undefined,
      verdict: why.length === 0 ? 'ok' : why.join(', '),
      superseded,
      never,
    });
  }
  return rows;
}

runDrill('expiry', args.json, async () => {
  const id = `expiry-${Date.now()}-${randomBytes(6).toString('hex')}`;
  const valkey = await drillValkey(args.valkey, false);
  const origin = await startOrigin(latencyMs);
  // Set when the warm-up fill lands: the epoch ms of the fill, of the clients' stop, and the run's length.
  let [t0Ms, stopAtMs, runMs] = [0, 0, 0];
  try {
    await valkey.drop(TABLE, [id]);
    const setup: Setup = {
      ...{ kind: 'setup', table: TABLE, id, template: origin.template, valkey: args.valkey },
      ...{ policy: POLICY, clients: args.clients, pauseMs: args['pause-ms'] },
      waitedAtMs: latencyMs,
    };
    const go = async () => {
      // One source read through a short-lived store of the same policy: the value every expiry starts from.
      const { store, close } = await originStore(args.valkey, TABLE, origin.template, POLICY);
      const layer = (await store.table(TABLE).get(id).finally(close)).layer;
      if (layer !== 'origin') throw new Error(`warm-up answered from ${layer}, not the source`);
      t0Ms = origin.readsLog(id)[0]?.answeredAtMs as number;
      stopAtMs = t0Ms + (args.expiries + 0.5) * ttlMs;
      // 100 ms between `go` and the first read, so every instance starts together.
      const atMs = Date.now() + 100;
      runMs = stopAtMs - atMs;
      const message: ExpiryGo = { kind: 'go', atEpochMs: atMs, stopAtMs };
      // Beyond the run: a last read may wait `waitTimeoutMs` (5 s), then the store closes (≤ 5 s).
      return { message, resultWithinMs: stopAtMs - Date.now() + 30_000 };
    };
    const setups = Array.from({ length: args.instances }, () => setup);
    const workers = await runWorkers<WorkerResult>(workerFile('expiry-worker'), setups, go);
    const sourceReads = origin.readsLog(id);
    const rows = judge(sourceReads, workers, t0Ms, stopAtMs);
    const errorCodes = workers.reduce((c, w) => addCounts(c, w.errorCodes), {});
    const waitedBy: Record<string, number> = {};
    for (const s of workers.flatMap((w) => w.waitedReads)) bump(waitedBy, s.source);
    const metrics: Record<string, Record<string, number>> = {};
    for (const [name, values] of workers.flatMap((w) => Object.entries(w.metrics)))
      metrics[name] = addCounts(metrics[name] ?? {}, values);
    const inRun = (r: (typeof rows)[number]) => r.softAtMs + t0Ms < stopAtMs;
    const observed = rows.filter((r) => inRun(r) && r.verdict !== 'superseded').length;
    const [asked, waitedOf] = [args.expiries, (r: (typeof rows)[number]) => r.waited];
    const total = (k: 'reads' | 'waited' | 'failures') => sum(workers, (w) => w[k]);
    const [reads, waited, failures] = [total('reads'), total('waited'), total('failures')];
    const labelled = (m: Record<string, number> = {}) =>
      Object.entries(m)
        .filter(([, n]) => n > 0)
        .map(([k, n]) => `${k || 'all'} ${n}`)
        .join(', ') || '0';
    const early = rows.filter((x) => x.newValueAtMs !== undefined && x.newValueAtMs < 0).length;
    const never = rows.filter((r) => r.never);
    const m = (name: string) => labelled(metrics[`echostore_${name}_total`]);
    return {
      title: `expiry drill: ${args.instances} processes × ${args.clients} client loops on one hot key, ttlMs ${ttlMs}, staleMs ${staleMs}, jitter 0, earlyRefreshBeta ${args.beta}, source latency ${latencyMs} ms, pause ${args['pause-ms']} ms`,
      body: [
        columns(
          rows.map((x) => [
            ...[x.expiry, `#${x.gen}`, x.softAtMs, x.sourceReads, x.refreshReadAtMs ?? '-'],
            ...[x.newValueAtMs ?? '-', x.waited, x.staleServed, x.staleForMs ?? '-'],
            x.verdict,
          ]),
          [
            ...['expiry', 'value', 'soft at ms', 'source reads', 'refresh read at', 'new value at'],
            ...['waited', 'stale served', 'stale for ms', 'result'],
          ],
        ),
        '  (soft at: ms after the warm-up fill; refresh read / new value at: ms relative to that soft expiry, negative = before it)',
        `  ${early} of ${rows.length} values replaced before their soft expiry (XFetch); source reads ${sourceReads.length} incl. the warm-up`,
        `  reads ${reads} (${Math.round(reads / (runMs / 1000))}/s); waited on the loader ${waited} (${labelled(waitedBy)})${staleMs === 0 ? ', not judged with staleMs 0' : ''}`,
        `  latency worst p99 ${Math.max(...workers.map((w) => w.p99Ms))} ms, max ${Math.max(...workers.map((w) => w.maxMs))} ms`,
        `  store counters: refreshes ${m('refreshes')}; lease ${m('lease')}; coherence ${m('coherence')}; fills ${m('fills')}; refresh failures ${m('refresh_failures')}`,
      ],
      ...{ observed, rows, sourceReads: sourceReads.length, reads, waited, waitedBy, metrics },
      checks: [
        law('soft expiries within the run', observed, `≥ ${args.expiries}`, observed >= asked),
        check(
          'at most one source read per expiry across the fleet (counted by the origin)',
          rows.every((r) => r.sourceReads <= 1),
          `source reads per expiry ${rows.map((r) => r.sourceReads).join(', ')}`,
        ),
        check(
          'every expiry refreshed, or superseded by an earlier refresh',
          never.length === 0,
          never.length === 0 ? 'all' : `never: expiry ${never.map((r) => r.expiry).join(', ')}`,
        ),
        ...(staleMs > 0 ? [law('reads that waited on the loader', sum(rows, waitedOf), 0)] : []),
        law('failed reads', failures && `${failures} (${labelled(errorCodes)})`, 0),
      ],
    };
  } finally {
    await valkey.drop(TABLE, [id]).catch(() => {});
    await valkey.close();
    await origin.close();
  }
});
