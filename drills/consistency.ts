/**
 * Consistency drill: how often a read through the cache returns a row older than one Postgres has
 * committed, counted against the database (Polaris's idea, Meta 2022), through a SIGKILL of the
 * stream's reader and a Valkey restart. Usage and laws: drills/README.md#consistency.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Agent, request } from 'undici';
import { metric, scrape } from '../harness/metrics.js';
import { startPostgres } from '../harness/postgres-server.js';
import { type Service, startService, startServices } from '../harness/service.js';
import { spawnValkey } from '../harness/valkey-server.js';
import { drillArgs, int, oneOf, runDrill } from './lib/cli.js';
import { BOUNDS_MS, Ledger, lagOf, nines } from './lib/consistency-report.js';
import { Reaper } from './lib/reaper.js';
import { columns, round } from './lib/report.js';

const args = drillArgs({
  instances: int(3, 2, 8),
  rows: int(200, 10, 100_000),
  seconds: int(60, 10, 3_600),
  readers: int(32, 1, 512),
  'write-ms': int(10, 1, 10_000),
  'lease-ms': int(500, 200, 60_000),
  faults: oneOf('both', 'kill', 'valkey', 'none'),
  'lag-p99-ms': int(100, 1, 60_000),
});

const SLOT = 'echostore_consistency';
const PROBE_MS = 2;
const PROBE_GIVE_UP_MS = 15_000;
const TAKEOVER_WITHIN_MS = 10_000;

async function main() {
  process.env.LOG_LEVEL ??= 'error';
  const reaper = new Reaper();
  const db = await startPostgres();
  const valkey = await spawnValkey({ track: (c) => reaper.track(c) });
  const admin = new pg.Pool({ connectionString: db.url, max: 4 });
  const agent = new Agent({ connections: 64, keepAliveTimeout: 10_000 });
  let services: Service[] = [];
  try {
    await admin.query('CREATE TABLE items (id integer PRIMARY KEY, version integer NOT NULL)');
    await admin.query('INSERT INTO items SELECT g, 1 FROM generate_series(1, $1) g', [args.rows]);
    const config = {
      valkey: { url: valkey.url },
      tables: {
        items: {
          ttlMs: 3_600_000,
          source: {
            kind: 'postgres',
            url: db.url,
            query: 'SELECT id, version FROM items WHERE id = ANY($1)',
            follow: {
              slot: SLOT,
              tables: [{ table: 'items', idColumn: 'id' }],
              leaseMs: args['lease-ms'],
            },
          },
        },
      },
    };
    services = await startServices(args.instances, config, (c) => reaper.track(c));
    await holderOf(services, TAKEOVER_WITHIN_MS);

    const ledger = new Ledger();
    const lags: Array<{ at: number; ms: number }> = [];
    let never = 0;
    let readErrors = 0;
    const probes = new Set<Promise<void>>();
    const random = (n: number) => Math.floor(Math.random() * n);
    const versionAt = async (s: Service, id: string): Promise<number> => {
      const r = await request(`${s.url}/v1/tables/items/items/${id}`, {
        dispatcher: agent,
        headersTimeout: 5_000,
        bodyTimeout: 5_000,
      });
      const body = (await r.body.json()) as { version?: number };
      if (r.statusCode !== 200 || typeof body.version !== 'number')
        throw new Error(`status ${r.statusCode}`);
      return body.version;
    };
    const probe = async (id: string, version: number, committedAt: number) => {
      while (performance.now() - committedAt < PROBE_GIVE_UP_MS) {
        const seen = await Promise.all(services.map((s) => versionAt(s, id).catch(() => -1)));
        if (seen.every((v) => v >= version)) {
          lags.push({ at: committedAt, ms: performance.now() - committedAt });
          return;
        }
        await sleep(PROBE_MS);
      }
      never++;
    };

    const began = performance.now();
    const endAt = began + args.seconds * 1_000;
    let stop = false;
    const writer = (async () => {
      while (!stop) {
        const id = String(1 + random(args.rows));
        const { rows } = await admin.query<{ version: number }>(
          'UPDATE items SET version = version + 1 WHERE id = $1 RETURNING version',
          [Number(id)],
        );
        const at = performance.now();
        const version = rows[0]?.version as number;
        ledger.committed(id, version, at);
        const p = probe(id, version, at).finally(() => probes.delete(p));
        probes.add(p);
        await sleep(args['write-ms']);
      }
    })();
    const readers = Array.from({ length: args.readers }, async () => {
      while (!stop) {
        const id = String(1 + random(args.rows));
        const s = services[random(services.length)] as Service;
        const started = performance.now();
        try {
          ledger.read(id, await versionAt(s, id), started);
        } catch {
          readErrors++;
        }
      }
    });

    // A third of the way: SIGKILL the instance reading the slot, time the takeover, start it again.
    await sleep(Math.max(0, began + (endAt - began) / 3 - performance.now()));
    let killedAt = Number.NaN;
    let takeoverMs = Number.NaN;
    if (args.faults === 'both' || args.faults === 'kill') {
      const holder = await holderOf(services, TAKEOVER_WITHIN_MS);
      const killed = services[holder] as Service;
      killed.process.kill('SIGKILL');
      killedAt = performance.now();
      const survivors = services.filter((s) => s !== killed);
      services = survivors;
      await holderOf(survivors, TAKEOVER_WITHIN_MS);
      takeoverMs = performance.now() - killedAt;
      services = [...survivors, await startService(config)];
      reaper.track(services.at(-1)?.process as never);
    }

    // Two thirds of the way: kill Valkey and start it again on the same port.
    await sleep(Math.max(0, began + ((endAt - began) * 2) / 3 - performance.now()));
    let valkeyKilledAt = Number.NaN;
    let downMs = Number.NaN;
    if (args.faults === 'both' || args.faults === 'valkey') {
      valkeyKilledAt = performance.now();
      await valkey.kill();
      await valkey.restart();
      downMs = performance.now() - valkeyKilledAt;
    }

    await sleep(Math.max(0, endAt - performance.now()));
    stop = true;
    await writer;
    await Promise.all(readers);
    await Promise.all([...probes]);

    // Every row on every instance against the database: a stale one is a lost invalidation.
    const { rows: truth } = await admin.query<{ id: number; version: number }>(
      'SELECT id, version FROM items',
    );
    let lost = 0;
    for (const s of services) {
      for (const row of truth) {
        const seen = await versionAt(s, String(row.id)).catch(() => -1);
        if (seen < row.version) {
          lost++;
          process.stderr.write(
            `stale at the end: ${s.url} id ${row.id} serves version ${seen}, the database ${row.version}\n`,
          );
        }
      }
    }

    const stale = ledger.stale();
    const reads = ledger.reads;
    // Outside the faults: from the SIGKILL until 1 s after the takeover, from Valkey's kill until 2 s after it answers.
    const faults = [
      [killedAt, killedAt + takeoverMs + 1_000],
      [valkeyKilledAt, valkeyKilledAt + downMs + 2_000],
    ];
    const steady = lags.filter(
      (l) => !faults.some(([from, to]) => l.at >= (from as number) && l.at <= (to as number)),
    );
    const lag = lagOf(
      steady.map((l) => l.ms),
      never,
    );
    const lagAll = lagOf(
      lags.map((l) => l.ms),
      never,
    );
    const failures: string[] = [];
    const at1s = stale[BOUNDS_MS.indexOf(1_000)] ?? 0;
    if (at1s > 0) failures.push(`${at1s} reads stale more than 1 s after a commit`);
    const lagBound = args['lag-p99-ms'];
    if (!(lag.p99Ms <= lagBound))
      failures.push(`invalidation lag p99 ${lag.p99Ms} ms > ${lagBound} ms`);
    if (never > 0) failures.push(`${never} commits never reached every instance`);
    if (takeoverMs > 3_000) failures.push(`takeover took ${Math.round(takeoverMs)} ms > 3 s`);
    if (lost > 0) failures.push(`${lost} rows stale at the end`);
    return {
      instances: args.instances,
      rows: args.rows,
      seconds: args.seconds,
      reads,
      readErrors,
      commits: ledger.commits,
      stale: BOUNDS_MS.map((boundMs, i) => ({
        boundMs,
        reads: stale[i] ?? 0,
        nines: nines(stale[i] ?? 0, reads),
      })),
      /** Commit → no instance serves an older version, ms: outside the fault windows, and every commit. */
      lag,
      lagAll,
      kill: { takeoverMs },
      valkeyRestart: { downMs },
      /** Rows some instance still served older than the database at the end (lost invalidations). */
      lost,
      pass: failures.length === 0,
      failures,
    };
  } finally {
    await Promise.all(services.map((s) => s.stop(2_000)));
    await agent.close();
    await admin.end();
    await valkey.stop();
    await db.stop();
  }
}

/** The index of the one instance reading the slot (its `echostore_changes_holder` is 1), once there is one. */
async function holderOf(services: Service[], withinMs: number): Promise<number> {
  const deadline = performance.now() + withinMs;
  while (performance.now() < deadline) {
    const held = await Promise.all(
      services.map((s) =>
        scrape(s.url).then(
          (m) => metric(m, 'echostore_changes_holder', { stream: SLOT }) === 1,
          () => false,
        ),
      ),
    );
    const i = held.indexOf(true);
    if (i >= 0) return i;
    await sleep(20);
  }
  throw new Error(`no instance read the change stream within ${withinMs} ms`);
}

function render(r: Awaited<ReturnType<typeof main>>): string {
  const lines = [
    `consistency drill: ${r.instances} instances, ${r.rows} rows, ${r.seconds} s, consumer SIGKILLed once, Valkey restarted once`,
    columns([
      ['reads', r.reads],
      ['read errors', r.readErrors],
      ['commits', r.commits],
    ]),
    columns(
      r.stale.map((s) => [
        `${s.boundMs} ms`,
        s.reads,
        s.nines === Number.POSITIVE_INFINITY ? '∞' : s.nines,
      ]),
      ['stale after commit', 'reads', 'nines'],
    ),
    columns([
      [
        'invalidation lag p50 / p99 / max, outside the faults',
        `${r.lag.p50Ms} / ${r.lag.p99Ms} / ${r.lag.maxMs} ms (${r.lag.measured} commits)`,
      ],
      [
        'invalidation lag p50 / p99 / max, every commit',
        `${r.lagAll.p50Ms} / ${r.lagAll.p99Ms} / ${r.lagAll.maxMs} ms (${r.lagAll.measured} commits)`,
      ],
      ['commits that never reached every instance', r.lag.never],
      ['new consumer reading after SIGKILL', `${round(r.kill.takeoverMs, 0)} ms`],
      ['Valkey down (kill → answers)', `${round(r.valkeyRestart.downMs, 0)} ms`],
      ['lost invalidations (stale at the end)', r.lost],
    ]),
    r.pass ? 'PASS' : `FAIL: ${r.failures.join('; ')}`,
  ];
  return `${lines.join('\n')}\n`;
}

runDrill('consistency', args.json, main, render);
