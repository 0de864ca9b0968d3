/**
 * Purge drill: hard, soft and table purges on three service processes under read load with loads
 * in flight, then two namespaces on one Valkey, judged by what the origin counted. Usage and
 * laws: drills/README.md#purge.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { byLabels, scrape } from '../harness/metrics.js';
import { HOLD_PREFIX, type Origin, withOrigin } from '../harness/origin.js';
import { type Service, startService, withServices } from '../harness/service.js';
import { drillArgs, int, runDrill, valkeyOption } from './lib/cli.js';
import { type OriginRead, readItem, readItems, timed } from './lib/http.js';
import { Loops, pick } from './lib/load.js';
import { addCounts, check, columns, law, sum } from './lib/report.js';
import { originConfig, QUIET } from './lib/store.js';

const args = drillArgs({
  rows: int(1000, 50, 100_000),
  tags: int(50, 20, 10_000),
  held: int(30, 0, 1000),
  'bound-ms': int(200, 0, 10_000),
  'read-ms': int(3000, 500, 60_000),
  readers: int(6, 1, 64),
  valkey: valkeyOption(),
});

const run = randomBytes(3).toString('hex');
const table = `purge-${run}`;
const boundMs = args['bound-ms'];

const rowIds = Array.from({ length: args.rows }, (_, i) => `r${i}`);
const heldIds = Array.from({ length: args.held }, (_, i) => `${HOLD_PREFIX}${run}-${i}`);
/** Row `r<i>` carries the tag `t<i mod tags>`; held rows all carry the first hard-purged tag. */
const tagOf = (id: string) =>
  id.startsWith(HOLD_PREFIX) ? 't0' : `t${Number(/(\d+)$/.exec(id)?.[1] ?? 0) % args.tags}`;
const hardTags = ['t0', 't1', 't2', 't3', 't4'];
const softTags = ['t5', 't6', 't7', 't8', 't9'];

/** Nothing expires during the drill (every reload is a purge's); a table purge's reloads queue. */
const POLICY = {
  ...{ ttlMs: 600_000, staleMs: 600_000, earlyRefreshBeta: 0, l1: { ttlMs: 600_000 } },
  ...{ maxConcurrentLoads: 256, initialConcurrentLoads: 256 },
  ...{ maxQueueDelayMs: 10_000, maxQueuedLoads: 10_000 },
};

const config = (origin: Origin, namespace: string) =>
  originConfig({ url: args.valkey }, table, origin.template, POLICY, { namespace, ...QUIET });

const get = (s: Service, id: string) => readItem(s.url, table, id);
const readAll = (s: Service, ids: Iterable<string>) => readItems(s.url, table, [...ids]);

/** `--readers` loops per service, each reading random ids of `pool()` until stopped. */
function readLoad(services: Service[], pool: () => string[]): Loops<OriginRead> {
  let turn = 0;
  const loops = new Loops<OriginRead>({
    loops: services.length * args.readers,
    pauseMs: 0,
    step: () => get(services[turn++ % services.length] as Service, pick(pool()) as string),
  });
  loops.start();
  return loops;
}

/** When a purge was sent and answered, epoch ms. */
type Purge = { issuedAtMs: number; answeredAtMs: number };

/** Purges `body` on `s`. */
async function purge(s: Service, body: object): Promise<Purge> {
  const issuedAtMs = Date.now();
  const r = await timed(`${s.url}/v1/tables/${table}/purge`, 30_000, 'POST', body);
  if (r.status !== 200) throw new Error(`purge answered ${r.status}: ${r.body}`);
  return { issuedAtMs, answeredAtMs: Date.now() };
}

/** When the origin's read `n` of `id` arrived (epoch ms). */
const arrivedAt = (origin: Origin, id: string, n: number) =>
  origin.readsLog(id)[n - 1]?.arrivedAtMs ?? Number.POSITIVE_INFINITY;

/** Source reads of `ids` that arrived at or after `sinceMs`. */
const readsSince = (origin: Origin, ids: Iterable<string>, sinceMs: number) =>
  sum([...ids], (id) => origin.readsLog(id).filter((r) => r.arrivedAtMs >= sinceMs).length);

/** Answers to requests sent after the purge's answer + the bound that carry a read from before it. */
function oldServed(origin: Origin, answers: OriginRead[], ids: Set<string>, p: Purge) {
  return answers.filter(
    (a) =>
      ids.has(a.id) &&
      a.sentAtMs > p.answeredAtMs + boundMs &&
      a.read > 0 &&
      arrivedAt(origin, a.id, a.read) < p.issuedAtMs,
  ).length;
}

/** L1 rows the services dropped (`hard`) or marked for a refresh (`soft`) so far. */
async function purgedRows(services: Service[]) {
  const all: Record<string, number> = {};
  for (const s of services)
    addCounts(all, byLabels(await scrape(s.url), 'echostore_purged_rows_total', table));
  return { hard: all.hard ?? 0, soft: all.soft ?? 0 };
}

async function fleet(origin: Origin) {
  const starts = [0, 1, 2].map(() => startService(config(origin, `drill-${run}`)));
  return withServices(starts, async (services) => {
    const [a, b, c] = services as [Service, Service, Service];
    for (const s of services) await readAll(s, rowIds);
    const warmReads = origin.totalReads();
    let pool = rowIds;
    const load = readLoad(services, () => pool);
    await sleep(300);
    // Loads in flight across the purge: the origin holds their first read.
    const heldAnswers = heldIds.map((id, i) => get(services[i % 3] as Service, id));
    for (const id of heldIds) await origin.seen(id, 5_000);
    // Source reads are told apart by the millisecond they arrived: none in the purge's.
    await sleep(5);
    const [hard, soft] = await Promise.all([
      purge(a, { tags: hardTags }),
      purge(b, { tags: softTags, soft: true }),
    ]);
    for (const id of heldIds) origin.release(id);
    pool = [...rowIds, ...heldIds];
    await sleep(args['read-ms']);
    await load.stop();
    await Promise.all(heldAnswers);
    // Every purged row read on every instance: each must show its one refresh.
    const hardIds = new Set([...rowIds.filter((id) => hardTags.includes(tagOf(id))), ...heldIds]);
    const softIds = new Set(rowIds.filter((id) => softTags.includes(tagOf(id))));
    const sweep: OriginRead[] = [];
    for (let round = 0; round < 50; round++) {
      const answers = (await Promise.all(services.map((s) => readAll(s, softIds)))).flat();
      sweep.push(...answers);
      if (answers.every((x) => arrivedAt(origin, x.id, x.read) >= soft.issuedAtMs)) break;
      await sleep(100);
    }
    for (const s of services) sweep.push(...(await readAll(s, hardIds)));
    const answers = [...load.samples, ...sweep];
    const purgeStart = Math.min(hard.issuedAtMs, soft.issuedAtMs);
    const others = rowIds.filter((id) => !hardIds.has(id) && !softIds.has(id));
    // A soft row's refresh: its second read's answer; old answers after it + the bound break the law.
    let [softOldAfterRefresh, softStaleServed] = [0, 0];
    for (const x of answers) {
      if (!softIds.has(x.id) || x.sentAtMs <= soft.answeredAtMs + boundMs) continue;
      if (arrivedAt(origin, x.id, x.read) >= soft.issuedAtMs) continue;
      softStaleServed++;
      const refreshed = origin.readsLog(x.id)[1]?.answeredAtMs ?? Number.POSITIVE_INFINITY;
      if (x.sentAtMs > refreshed + boundMs) softOldAfterRefresh++;
    }
    const t = {
      hardRows: hardIds.size,
      softRows: softIds.size,
      hardPurgeMs: hard.answeredAtMs - hard.issuedAtMs,
      softPurgeMs: soft.answeredAtMs - soft.issuedAtMs,
      hardOldServed: oldServed(origin, answers, hardIds, hard),
      softStaleServed,
      softOldAfterRefresh,
      hardReads: readsSince(origin, hardIds, purgeStart),
      softReads: readsSince(origin, softIds, purgeStart),
      otherReads: readsSince(origin, others, purgeStart),
      /** Purged rows not read exactly once since the purge: `id: reads`, the first ten. */
      misread: [...hardIds, ...softIds]
        .map((id) => `${id}: ${readsSince(origin, [id], purgeStart)}`)
        .filter((x) => !x.endsWith(': 1'))
        .slice(0, 10),
    };
    const tagRows = await purgedRows(services);

    // The table purge, under the same read load.
    const all = [...rowIds, ...heldIds];
    const tableLoad = readLoad(services, () => all);
    await sleep(300);
    const whole = await purge(c, { all: true });
    await sleep(args['read-ms']);
    await tableLoad.stop();
    const tableSweep = (await Promise.all(services.map((s) => readAll(s, all)))).flat();
    const w = {
      rows: all.length,
      purgeMs: whole.answeredAtMs - whole.issuedAtMs,
      oldServed: oldServed(origin, [...tableLoad.samples, ...tableSweep], new Set(all), whole),
      reads: readsSince(origin, all, whole.issuedAtMs),
    };
    const dropped = await purgedRows(services);
    const other = args.rows - t.hardRows - t.softRows + heldIds.length;
    return {
      tagPhase: t,
      tablePhase: w,
      rows: [
        ['hard (5 tags)', t.hardRows, t.hardPurgeMs, t.hardOldServed, '-', t.hardReads],
        [
          'soft (5 tags)',
          t.softRows,
          t.softPurgeMs,
          t.softOldAfterRefresh,
          softStaleServed,
          t.softReads,
        ],
        ['other rows', other, '-', '-', '-', t.otherReads],
        ['table (all)', w.rows, w.purgeMs, w.oldServed, '-', w.reads],
      ],
      note: `  reads under load: ${load.samples.length} during the tag purges, ${tableLoad.samples.length} during the table purge (warm-up ${warmReads}); L1 rows dropped: tag purges ${tagRows.hard} hard / ${tagRows.soft} soft refreshed, table purge ${dropped.hard - tagRows.hard}`,
      checks: [
        law('tag purges: hard-purged rows served after the answer + bound', t.hardOldServed, 0),
        law(
          'tag purges: soft-purged rows served old after their one refresh + bound',
          t.softOldAfterRefresh,
          0,
        ),
        check(
          'tag purges: source reads = purged rows, 0 for the others (counted by the origin)',
          t.hardReads === t.hardRows && t.softReads === t.softRows && t.otherReads === 0,
          `${t.hardReads} + ${t.softReads} for ${t.hardRows} + ${t.softRows} rows, ${t.otherReads} for the others${t.misread.length ? `; not read once: ${t.misread.join(', ')}` : ''}`,
        ),
        check(
          'table purge: 0 old answers after the bound; source reads = rows',
          w.oldServed === 0 && w.reads === w.rows,
          `${w.oldServed} old answers; ${w.reads} source reads for ${w.rows} rows`,
        ),
      ],
    };
  });
}

async function namespaces() {
  return withOrigin([5, 20_000, { label: 'one' }], (one) =>
    withOrigin([5, 20_000, { label: 'two' }], (two) =>
      withServices(
        [startService(config(one, `ns-one-${run}`)), startService(config(two, `ns-two-${run}`))],
        async ([s1, s2]) => {
          const ids = rowIds.slice(0, 100);
          let foreign = 0;
          for (const id of ids)
            for (const [s, label] of [
              [s1, 'one'],
              [s2, 'two'],
              [s1, 'one'],
            ] as const)
              if ((await get(s as Service, id)).origin !== label) foreign++;
          const [r1, r2] = [one.totalReads(), two.totalReads()];
          return check(
            `namespaces: ${ids.length} ids read on two deployments of one table name: no answer from the other's source; source reads ${ids.length} each`,
            foreign === 0 && r1 === ids.length && r2 === ids.length,
            `${foreign} answers from the other's source; source reads ${r1} / ${r2}`,
          );
        },
      ),
    ),
  );
}

runDrill('purge', args.json, () =>
  withOrigin([10, 20_000, { surrogateKey: tagOf }], async (origin) => {
    const f = await fleet(origin);
    return {
      title: `purge drill: 3 instances, ${args.rows} rows over ${args.tags} tags (+${heldIds.length} held loads), coherence bound ${boundMs} ms`,
      body: [
        columns(f.rows, [
          ...['purge', 'rows', 'answered in ms', 'old served after bound'],
          ...['stale served (soft)', 'source reads after'],
        ]),
        f.note,
      ],
      ...{ tagPhase: f.tagPhase, tablePhase: f.tablePhase },
      checks: [...f.checks, await namespaces()],
    };
  }),
);
