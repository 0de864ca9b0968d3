/**
 * `bench:peers`' fleet cold read of echostore alone (issue 22 item 1): the Valkey round trips
 * of the holder and of a waiter, and how soon a waiter answers after the fill, with the fill's
 * event carrying the value and carrying its version only, side by side. Usage:
 * drills/README.md#benchpeers.
 */
import { loadavg } from 'node:os';
import { Redis } from 'ioredis';
import { track } from '../drills/lib/reaper.js';
import { median, percentile } from '../drills/lib/report.js';
import { runWorkers, together } from '../drills/lib/workers.js';
import { spawnValkey } from '../harness/valkey-server.js';
import type { Result, Setup } from './peers-worker.js';

/** What the bench lends {@link fleetWake}. */
export interface WakeBench {
  rounds: number;
  /** The loader's sleep, ms. */
  latencyMs: number;
  /** The worker script (`peers-worker.js`). */
  worker: string;
  /** A table name no other round uses. */
  tagOf: (what: string) => string;
  print: (title: string, rows: Array<Array<string | number>>, header?: string[]) => void;
}

const fmt = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');

/** Commands the scripts run (INFO commandstats counts them too): not round trips of their own. */
const IN_SCRIPTS = new Set(['time', 'get', 'set', 'pttl', 'del', 'publish', 'pexpire']);
/** The bench's own commands, a worker's goodbye, and the subscriber's heartbeat (not the read's). */
const NOT_COUNTED = new Set(['config|resetstat', 'info', 'quit', 'ping']);

/**
 * Round trips in `INFO commandstats` (`info`): `scripts` is every EVALSHA and EVAL less the
 * store's health probes (a script that writes, reads and deletes one hash field, each probe
 * one `HDEL`), `probes` those, `other` every other command a client sent (an epochs `HGETALL`).
 */
function roundTrips(info: string): { scripts: number; probes: number; other: number } {
  const calls = Object.fromEntries(
    [...info.matchAll(/^cmdstat_([\w|-]+):calls=(\d+)/gm)].map((m) => [m[1], Number(m[2])]),
  ) as Record<string, number>;
  const probes = calls.hdel ?? 0;
  const probeInner = new Set(['hset', 'hget', 'hdel', 'hgetall']);
  const other =
    Object.entries(calls)
      .filter(([c]) => !IN_SCRIPTS.has(c) && !NOT_COUNTED.has(c) && !probeInner.has(c))
      .filter(([c]) => c !== 'evalsha' && c !== 'eval')
      .reduce((n, [, x]) => n + x, 0) + Math.max(0, (calls.hgetall ?? 0) - probes);
  return { scripts: (calls.evalsha ?? 0) + (calls.eval ?? 0) - probes, probes, other };
}

/**
 * The fleet cold read on a redis-server of the bench's own (a free port: `CONFIG RESETSTAT`
 * touches nobody else's counters), echostore alone, in two ways side by side, interleaved round
 * by round: the fill's event carrying the value (the default) and carrying its version only
 * (`fillEventMaxBytes: 0`: how every waiter woke before issue 22, reading L2 once more). Counts
 * the Valkey round trips (scripts run, from `INFO commandstats`) of the holder (a round of one
 * process) and of a waiter (a round of six, less the holder's, ÷ 5), and times each waiter's
 * answer from the moment the fill's event reached the bench's own subscriber (as it reaches
 * the waiters' subscribers; one host, one clock).
 */
export async function fleetWake(bench: WakeBench): Promise<Record<string, unknown>> {
  const { rounds, latencyMs, worker: WORKER, tagOf } = bench;
  const server = await spawnValkey({ track });
  const admin = new Redis(server.url, { maxRetriesPerRequest: 0 });
  const fills = await watchFills(server.url);
  const variants = [
    { name: 'fill event with the value (default)', policy: {} },
    { name: 'fill event with the version only (before)', policy: { fillEventMaxBytes: 0 } },
  ];
  const per = variants.map(() => ({
    holder: [] as number[],
    waiter: [] as number[],
    other: 0,
    reads: [] as number[],
    over: [] as number[],
    wakeMs: [] as number[],
    firstMs: [] as number[],
    holderMs: [] as number[],
    pairMs: [] as number[],
    probes: 0,
    info: [] as string[],
  }));
  const measured = async (setups: Setup[]) => {
    const results = await runWorkers<Result>(WORKER, setups, async () => {
      await admin.config('RESETSTAT');
      return together(200, 120_000)();
    });
    const info = (await admin.info('commandstats')) as string;
    return { results, ...roundTrips(info), info };
  };
  try {
    // Loads the scripts into the server once (a first EVALSHA answered NOSCRIPT is one more trip).
    await measured([wakeSetup(server.url, tagOf('wake'), 'warm', {}, latencyMs)]);
    for (let round = 0; round < rounds; round++) {
      for (const [i, v] of variants.entries()) {
        const f = per[i] as (typeof per)[number];
        const tag = tagOf('wake');
        const alone = await measured([
          wakeSetup(server.url, tag, `a${round}`, v.policy, latencyMs),
        ]);
        const fleet = await measured(
          Array.from({ length: 6 }, () =>
            wakeSetup(server.url, tag, `w${round}`, v.policy, latencyMs),
          ),
        );
        f.info.push(alone.info, fleet.info);
        f.probes += alone.probes + fleet.probes;
        f.holder.push(alone.scripts);
        f.waiter.push((fleet.scripts - alone.scripts) / 5);
        f.other += alone.other + fleet.other;
        f.reads.push(fleet.results.reduce((n, r) => n + r.sourceReads, 0));
        const loader = fleet.results.flatMap((r) => r.loaderMs);
        const latencies = fleet.results.flatMap((r) => r.latenciesMs);
        f.over.push(percentile(latencies, 99) - (loader.length > 0 ? median(loader) : latencyMs));
        const filledAt = fills.at(tag, `w${round}`);
        for (const r of fleet.results) {
          const since = r.answeredAtMs.map((t) => t - filledAt);
          (r.sourceReads > 0 ? f.holderMs : f.wakeMs).push(...since);
          // The waiter's flight woke at its first answer; the rest is handing it to 200 callers.
          f.firstMs.push(...r.wokeAtMs.map((t) => t - filledAt));
        }
        // Two processes, one reader each, 40 ids 50 ms apart: the wake-up without a herd's CPU.
        const ids = Array.from({ length: PAIR_IDS }, (_, k) => `p${round}-${k}`);
        const pair = await runWorkers<Result>(
          WORKER,
          [0, 1].map(() => ({
            ...wakeSetup(server.url, tag, '', v.policy, latencyMs),
            shape: paced(ids),
          })),
          together(200, 120_000),
        );
        f.pairMs.push(
          ...pair.flatMap((r) => r.wokeAtMs.map((t, k) => t - fills.at(tag, r.wokeIds[k] ?? ''))),
        );
      }
    }
  } finally {
    fills.close();
    admin.disconnect();
    await server.stop();
  }
  const report = Object.fromEntries(
    variants.map((v, i) => {
      const f = per[i] as (typeof per)[number];
      return [
        v.name,
        {
          holderTrips: median(f.holder),
          waiterTrips: median(f.waiter),
          otherCommands: f.other,
          reads: median(f.reads),
          overheadMs: median(f.over),
          wakeP50Ms: percentile(f.wakeMs, 50),
          wakeP99Ms: percentile(f.wakeMs, 99),
          firstAnswerP50Ms: percentile(f.firstMs, 50),
          firstAnswerP99Ms: percentile(f.firstMs, 99),
          holderReadersP50Ms: percentile(f.holderMs, 50),
          pairWakeP50Ms: percentile(f.pairMs, 50),
          pairWakeP99Ms: percentile(f.pairMs, 99),
          pairSamples: f.pairMs.length,
          probes: f.probes,
          commandstats: f.info,
        },
      ];
    }),
  );
  const rows = variants.map((v, i) => {
    const f = per[i] as (typeof per)[number];
    return [
      v.name,
      median(f.reads),
      fmt(median(f.holder)),
      fmt(median(f.waiter)),
      f.other,
      fmt(percentile(f.firstMs, 50), 2),
      fmt(percentile(f.firstMs, 99), 2),
      fmt(percentile(f.wakeMs, 50), 2),
      fmt(percentile(f.wakeMs, 99), 2),
      fmt(median(f.over)),
      `${fmt(percentile(f.pairMs, 50), 2)} / ${fmt(percentile(f.pairMs, 99), 2)}`,
    ];
  });
  bench.print(
    `fleet cold read, echostore: 6 processes × 200 readers of one id, own redis-server, ${rounds} rounds (median; wake: from the fill event's arrival at the bench's own subscriber to a waiter process's first answer, and to each of its answers; then 2 processes × 1 reader, ${PAIR_IDS} ids per round; load average ${loadavg()[0]?.toFixed(1)})`,
    rows,
    [
      '',
      'source reads',
      'holder round trips',
      'waiter round trips',
      'other commands, all rounds',
      'first answer p50 ms',
      'first answer p99 ms',
      'every answer p50 ms',
      'every answer p99 ms',
      'p99 − loader ms',
      '2 × 1 reader: wake p50 / p99 ms',
    ],
  );
  return report;
}

const PAIR_IDS = 40;

/**
 * When each `fill` event reached a subscriber of the bench's own (epoch ms), by table and id:
 * the moment the waiters' subscribers get it too. `at` is NaN for a fill not seen.
 */
async function watchFills(url: string) {
  const sub = new Redis(url, { maxRetriesPerRequest: 0 });
  const seen = new Map<string, number>();
  sub.on('pmessage', (_pattern: string, channel: string, message: string) => {
    const receivedAt = performance.timeOrigin + performance.now();
    let event: { k?: string; id?: string };
    try {
      event = JSON.parse(message) as { k?: string; id?: string };
    } catch {
      return; // not an event (the store's start-up probe of the channel)
    }
    const key = `${channel.slice('ecc:events:'.length)}\u0000${event.id}`;
    if (event.k === 'fill' && !seen.has(key)) seen.set(key, receivedAt);
  });
  await sub.psubscribe('ecc:events:*');
  return {
    at: (table: string, id: string) => seen.get(`${table}\u0000${id}`) ?? Number.NaN,
    close: () => sub.disconnect(),
  };
}
const paced = (ids: string[]): Setup['shape'] => ({ kind: 'paced', ids, everyMs: 50 });

/** One process of {@link fleetWake}: echostore, 200 readers of `id` in table `tag`. */
function wakeSetup(
  url: string,
  tag: string,
  id: string,
  policy: Record<string, unknown>,
  latencyMs: number,
): Setup {
  return {
    kind: 'setup',
    peer: 'echostore',
    valkey: url,
    tag,
    latencyMs,
    shape: { kind: 'herd', id, readers: 200 },
    policy,
    settleMs: 500,
  };
}
