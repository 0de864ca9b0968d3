/**
 * Admission on a virtual clock: the real `Admission` class fed bursts of loads whose
 * durations follow a chosen distribution, with no Valkey, HTTP or machine timing in the figures.
 * Usage and scenarios: docs/benchmarks.md#benchadmission.
 */
import { writeFileSync } from 'node:fs';
import { drillArgs, int } from '../drills/lib/cli.js';
import { columns, round } from '../drills/lib/report.js';
import { ShedError } from '../src/errors.js';
import { Admission } from '../src/protection/admission.js';
import { mulberry32 } from '../src/random.js';

const args = drillArgs({ seconds: int(30, 1, 3_600), seed: int(42, 0) });

interface Scenario {
  name: string;
  /** A load's duration, ms, given the virtual time and a uniform draw in [0, 1). */
  durationMs: (nowMs: number, u: number, runMs: number) => number;
  limit: number;
  /** Where the limit starts (`initialConcurrentLoads`); default `limit`, a fixed ceiling. */
  initial?: number;
  boundMs: number;
  burst: number;
  everyMs: number;
}

const exponential = (_: number, u: number) => -100 * Math.log(1 - u);
const slowsDown = (now: number, _: number, runMs: number) => (now < runMs / 2 ? 20 : 500);
/** A scenario named by its load durations (`what`) and its figures. */
const scenario = (
  what: string,
  durationMs: Scenario['durationMs'],
  [limit, boundMs, burst, everyMs, initial]: [number, number, number, number, number?],
): Scenario => {
  const slots = initial === undefined ? limit : `${initial} growing to ${limit}`;
  const name = `${what}, ${slots} slots, ${burst} every ${everyMs} ms`;
  return { name, durationMs, limit, boundMs, burst, everyMs, initial };
};
const SCENARIOS: Scenario[] = [
  scenario('steady 100 ms', () => 100, [8, 1_000, 30, 600]),
  scenario('exponential mean 100 ms', exponential, [8, 1_000, 30, 600]),
  scenario('exponential mean 100 ms', exponential, [16, 2_000, 50, 600]),
  scenario('20 ms, then 500 ms half-way', slowsDown, [16, 2_000, 100, 500]),
  scenario('20 ms, then 500 ms half-way', slowsDown, [256, 2_000, 100, 500, 16]),
];

/** Runs one scenario on a virtual clock, one event at a time (promises settle between events). */
async function simulate(s: Scenario, runMs: number, seed: number) {
  const random = mulberry32(seed);
  let now = 0;
  const admission = new Admission({
    maxLimit: s.limit,
    ...(s.initial === undefined ? {} : { initialLimit: s.initial }),
    maxQueueDelayMs: s.boundMs,
    maxQueued: 1_000_000,
    now: () => now,
  });
  const events: Array<{ at: number; run: () => void }> = [];
  const at = (t: number, run: () => void) => {
    events.push({ at: t, run });
    events.sort((a, b) => a.at - b.at);
  };
  let [asked, shed, late, longestWaitMs, highestLimit, slowPeak] = [0, 0, 0, 0, 0, 0];
  const shedError = (retryAfterMs: number) => new ShedError('shed', { retryAfterMs });
  const start = (id: string) => {
    asked++;
    const askedAt = now;
    admission.acquire(shedError, id).then(
      (permit) => {
        const waited = now - askedAt;
        longestWaitMs = Math.max(longestWaitMs, waited);
        if (waited > s.boundMs) late++;
        highestLimit = Math.max(highestLimit, admission.limit);
        if (now >= runMs / 2) slowPeak = Math.max(slowPeak, admission.active);
        at(now + s.durationMs(now, random(), runMs), () => permit.release('ok'));
      },
      () => shed++,
    );
  };
  let n = 0;
  for (let t = 0; t < runMs; t += s.everyMs) {
    at(t, () => {
      for (let i = 0; i < s.burst; i++) start(`id-${n++}`);
    });
  }
  for (let e = events.shift(); e !== undefined; e = events.shift()) {
    now = e.at;
    e.run();
    await new Promise((r) => setImmediate(r));
  }
  const shedPct = round((100 * shed) / asked, 1);
  return {
    ...{ scenario: s.name, asked, shedPct, late, longestWaitMs: Math.round(longestWaitMs) },
    ...{ highestLimit, secondHalfPeak: slowPeak },
  };
}

const runMs = args.seconds * 1000;
const results = [];
for (const s of SCENARIOS) results.push(await simulate(s, runMs, args.seed));
const rows = results.map((r) => Object.values({ ...r, shedPct: `${r.shedPct} %` }));
const header = ['scenario', 'loads', 'shed', 'waited past the bound', 'longest wait ms'];
header.push('highest limit', 'loads at once, 2nd half');
const title = `admission on a virtual clock, ${args.seconds} s per scenario (seed ${args.seed})`;
// `--json` alone: the JSON on stdout instead of the table, as the drills do.
if (args.json === '-') process.stdout.write(`${JSON.stringify(results)}\n`);
else process.stdout.write(`${title}\n${columns(rows, header)}\n`);
if (args.json !== undefined && args.json !== '-') {
  writeFileSync(args.json, JSON.stringify(results, null, 2));
}
// A queued load's own timer (real time) would outlive the virtual run: stop here.
process.exit(0);
