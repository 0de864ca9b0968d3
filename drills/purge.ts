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
import { columns, verdict } from './lib/report.js';
import { originConfig } from './lib/store.js';

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
const tagOf = (id: string): string => {
  const n = Number(/(\d+)$/.exec(id)?.[1] ?? 0);
  // Held rows all carry the first hard-purged tag.
  return id.startsWith(HOLD_PREFIX) ? 't0' : `t${n % args.tags}`;
};
const hardTags = ['t0', 't1', 't2', 't3', 't4'];
const softTags = ['t5', 't6', 't7', 't8', 't9'];

/** Nothing expires during the drill (every reload is a purge's); a table purge's reloads queue. */
const POLICY = {
  ttlMs: 600_000,
  staleMs: 600_000,
  earlyRefreshBeta: 0,
  l1: { ttlMs: 600_000 },
  maxConcurrentLoads: 256,
  initialConcurrentLoads: 256,
  maxQueueDelayMs: 10_000,
  maxQueuedLoads: 10_000,
};

const config = (origin: Origin, namespace: string) =>
  originConfig({ url: args.valkey }, table, origin.template, POLICY, {
    namespace,
    log: { level: 'error' },
  });

const get = (s: Service, id: string) => readItem(s.url, table, id);

const readAll = (s: Service, ids: string[]) => readItems(s.url, table, ids);

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

/** Source reads of `id` that arrived at or after `sinceMs`. */
const readsSince = (origin: Origin, id: string, sinceMs: number) =>
  origin.readsLog(id).filter((r) => r.arrivedAtMs >= sinceMs).length;

/** Source reads of all of `ids` that arrived at or after `sinceMs`. */
const readsOfSince = (origin: Origin, ids: Iterable<string>, sinceMs: number) =>
  [...ids].reduce((n, id) => n + readsSince(origin, id, sinceMs), 0);

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

async function purgedRows(services: Service[]) {
  const out = { hard: 0, soft: 0 };
  for (const s of services) {
    const rows = byLabels(await scrape(s.url), 'echostore_purged_rows_total', table);
    out.hard += rows.hard ?? 0;
    out.soft += rows.soft ?? 0;
  }
  return out;
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
      const answers = (await Promise.all(services.map((s) => readAll(s, [...softIds])))).flat();
      sweep.push(...answers);
      if (answers.every((x) => arrivedAt(origin, x.id, x.read) >= soft.issuedAtMs)) break;
      await sleep(100);
    }
    for (const s of services) sweep.push(...(await readAll(s, [...hardIds])));
    const answers = [...load.samples, ...sweep];
    const purgeStart = Math.min(hard.issuedAtMs, soft.issuedAtMs);
    const others = rowIds.filter((id) => !hardIds.has(id) && !softIds.has(id));
    // A soft row's refresh: its second read's answer; old answers after it + the bound break the law.
    let softOldAfterRefresh = 0;
    let softStaleServed = 0;
    for (const x of answers) {
      if (!softIds.has(x.id) || x.sentAtMs <= soft.answeredAtMs + boundMs) continue;
      if (arrivedAt(origin, x.id, x.read) >= soft.issuedAtMs) continue;
      softStaleServed++;
      const refreshed = origin.readsLog(x.id)[1]?.answeredAtMs ?? Number.POSITIVE_INFINITY;
      if (x.sentAtMs > refreshed + boundMs) softOldAfterRefresh++;
    }
    const tagPhase = {
      warmReads,
      answers: load.samples.length,
      hardRows: hardIds.size,
      softRows: softIds.size,
      held: heldIds.length,
      hardPurgeMs: hard.answeredAtMs - hard.issuedAtMs,
      softPurgeMs: soft.answeredAtMs - soft.issuedAtMs,
      hardOldServed: oldServed(origin, answers, hardIds, hard),
      softStaleServed,
      softOldAfterRefresh,
      hardReads: readsOfSince(origin, hardIds, purgeStart),
      softReads: readsOfSince(origin, softIds, purgeStart),
      otherReads: readsOfSince(origin, others, purgeStart),
      /** Purged rows not read exactly once since the purge: `id: reads`, the first ten. */
      misread: [...hardIds, ...softIds]
        .filter((id) => readsSince(origin, id, purgeStart) !== 1)
        .slice(0, 10)
        .map((id) => `${id}: ${readsSince(origin, id, purgeStart)}`),
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
    const tableAnswers = [...tableLoad.samples, ...tableSweep];
    const allIds = new Set(all);
    const tablePhase = {
      answers: tableLoad.samples.length,
      rows: all.length,
      purgeMs: whole.answeredAtMs - whole.issuedAtMs,
      oldServed: oldServed(origin, tableAnswers, allIds, whole),
      reads: readsOfSince(origin, all, whole.issuedAtMs),
    };
    const rowsDropped = await purgedRows(services);
    return {
      tagPhase: {
        ...tagPhase,
        l1RowsDropped: tagRows,
        pass:
          tagPhase.hardOldServed === 0 &&
          tagPhase.softOldAfterRefresh === 0 &&
          tagPhase.hardReads === tagPhase.hardRows &&
          tagPhase.softReads === tagPhase.softRows &&
          tagPhase.otherReads === 0,
      },
      tablePhase: {
        ...tablePhase,
        l1RowsDropped: {
          hard: rowsDropped.hard - tagRows.hard,
          soft: rowsDropped.soft - tagRows.soft,
        },
        pass: tablePhase.oldServed === 0 && tablePhase.reads === tablePhase.rows,
      },
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
          const answers = { one: [] as OriginRead[], two: [] as OriginRead[] };
          for (const id of ids) {
            answers.one.push(await get(s1 as Service, id));
            answers.two.push(await get(s2 as Service, id));
            answers.one.push(await get(s1 as Service, id));
          }
          const foreign =
            answers.one.filter((x) => x.origin !== 'one').length +
            answers.two.filter((x) => x.origin !== 'two').length;
          return {
            ids: ids.length,
            readsOne: one.totalReads(),
            readsTwo: two.totalReads(),
            foreignAnswers: foreign,
            pass:
              foreign === 0 && one.totalReads() === ids.length && two.totalReads() === ids.length,
          };
        },
      ),
    ),
  );
}

async function main() {
  return withOrigin([10, 20_000, { surrogateKey: tagOf }], async (origin) => {
    const f = await fleet(origin);
    const ns = await namespaces();
    return {
      rows: args.rows,
      tags: args.tags,
      boundMs,
      ...f,
      namespaces: ns,
      pass: f.tagPhase.pass && f.tablePhase.pass && ns.pass,
    };
  });
}

type Report = Awaited<ReturnType<typeof main>>;

function render(r: Report): string {
  const t = r.tagPhase;
  const w = r.tablePhase;
  const n = r.namespaces;
  return `${[
    `purge drill: 3 instances, ${r.rows} rows over ${r.tags} tags (+${t.held} held loads), coherence bound ${r.boundMs} ms`,
    columns(
      [
        ['hard (5 tags)', t.hardRows, t.hardPurgeMs, t.hardOldServed, '-', t.hardReads],
        [
          'soft (5 tags)',
          t.softRows,
          t.softPurgeMs,
          t.softOldAfterRefresh,
          t.softStaleServed,
          t.softReads,
        ],
        ['other rows', r.rows - t.hardRows - t.softRows + t.held, '-', '-', '-', t.otherReads],
        ['table (all)', w.rows, w.purgeMs, w.oldServed, '-', w.reads],
      ],
      [
        'purge',
        'rows',
        'answered in ms',
        'old served after bound',
        'stale served (soft)',
        'source reads after',
      ],
    ),
    `  reads under load: ${t.answers} during the tag purges, ${w.answers} during the table purge; L1 rows dropped: tag purges ${t.l1RowsDropped.hard} hard / ${t.l1RowsDropped.soft} soft refreshed, table purge ${w.l1RowsDropped.hard}`,
    `  ${verdict(t.pass)}: hard-purged rows never served after the answer + bound; soft ones only until their one refresh; source reads = purged rows (${t.hardRows} + ${t.softRows}), 0 for the others`,
    `  ${verdict(w.pass)}: table purge: 0 old answers after the bound; source reads = rows (${w.rows})`,
    `  ${verdict(n.pass)}: namespaces: ${n.ids} ids read on two deployments of one table name: ${n.foreignAnswers} answers from the other's source; source reads ${n.readsOne} / ${n.readsTwo}`,
    r.pass ? 'PASS: every purge law holds' : 'FAIL: a purge law is broken',
  ].join('\n')}\n`;
}

runDrill('purge', args.json, main, render);
