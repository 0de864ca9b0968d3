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
import { type Service, startServices } from '../harness/service.js';
import { spawnValkey } from '../harness/valkey-server.js';
import { drillArgs, int, oneOf, runDrill } from './lib/cli.js';
import { columns, law, p50p99, round } from './lib/report.js';

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
/** Stale-read bounds after a commit, ms. */
const BOUNDS_MS = [0, 100, 1_000];
/** The writer's one statement: the next version of a row. */
const BUMP = 'UPDATE items SET version = version + 1 WHERE id = $1 RETURNING version';
const PROBE_MS = 2;
const PROBE_GIVE_UP_MS = 15_000;
const TAKEOVER_WITHIN_MS = 10_000;

runDrill('consistency', args.json, async () => {
  process.env.LOG_LEVEL ??= 'error';
  const db = await startPostgres();
  const valkey = await spawnValkey();
  const admin = new pg.Pool({ connectionString: db.url, max: 4 });
  const agent = new Agent({ connections: 64, keepAliveTimeout: 10_000 });
  let services: Service[] = [];
  try {
    await admin.query('CREATE TABLE items (id integer PRIMARY KEY, version integer NOT NULL)');
    await admin.query('INSERT INTO items SELECT g, 1 FROM generate_series(1, $1) g', [args.rows]);
    const query = 'SELECT id, version FROM items WHERE id = ANY($1)';
    const tables = [{ table: 'items', idColumn: 'id' }];
    const follow = { slot: SLOT, tables, leaseMs: args['lease-ms'] };
    const source = { kind: 'postgres', url: db.url, query, follow };
    const config = { valkey: { url: valkey.url }, tables: { items: { ttlMs: 3_600_000, source } } };
    services = await startServices(args.instances, config);
    await holderOf(services, TAKEOVER_WITHIN_MS);

    // A read is stale at bound δ when the next version of its id had committed more than δ
    // before the read started (counted against the database, Polaris's idea).
    const committedAt = new Map<string, number>();
    const stale = BOUNDS_MS.map(() => 0);
    let reads = 0;
    const lags: Array<{ at: number; ms: number }> = [];
    let [never, readErrors] = [0, 0];
    const probes = new Set<Promise<void>>();
    const random = (n: number) => Math.floor(Math.random() * n);
    const versionAt = async (s: Service, id: string): Promise<number> => {
      const options = { dispatcher: agent, headersTimeout: 5_000, bodyTimeout: 5_000 };
      const r = await request(`${s.url}/v1/tables/items/items/${id}`, options);
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
        const { rows } = await admin.query<{ version: number }>(BUMP, [Number(id)]);
        const at = performance.now();
        const version = rows[0]?.version as number;
        committedAt.set(`${id}@${version}`, at);
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
          const next = committedAt.get(`${id}@${(await versionAt(s, id)) + 1}`);
          reads++;
          for (const [b, bound] of BOUNDS_MS.entries())
            if (next !== undefined && started - next > bound) stale[b] = (stale[b] ?? 0) + 1;
        } catch {
          readErrors++;
        }
      }
    });

    // A third of the way: SIGKILL the instance reading the slot, time the takeover, start it again.
    await sleep(Math.max(0, began + (endAt - began) / 3 - performance.now()));
    let [killedAt, takeoverMs] = [Number.NaN, Number.NaN];
    if (args.faults === 'both' || args.faults === 'kill') {
      const killed = services[await holderOf(services, TAKEOVER_WITHIN_MS)] as Service;
      killed.process.kill('SIGKILL');
      killedAt = performance.now();
      services = services.filter((s) => s !== killed);
      await holderOf(services, TAKEOVER_WITHIN_MS);
      takeoverMs = performance.now() - killedAt;
      services.push(...(await startServices(1, config)));
    }

    // Two thirds of the way: kill Valkey and start it again on the same port.
    await sleep(Math.max(0, began + ((endAt - began) * 2) / 3 - performance.now()));
    let [valkeyKilledAt, downMs] = [Number.NaN, Number.NaN];
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
    const truth = (await admin.query<{ id: number; version: number }>('SELECT * FROM items')).rows;
    let lost = 0;
    for (const s of services) {
      for (const { id, version } of truth) {
        const seen = await versionAt(s, String(id)).catch(() => -1);
        if (seen >= version) continue;
        lost++;
        process.stderr.write(`stale at the end: ${s.url} id ${id}: ${seen}, not ${version}\n`);
      }
    }

    // Outside the faults: from the SIGKILL until 1 s after the takeover, from Valkey's kill until 2 s after it answers.
    const inFault = ({ at }: { at: number }) =>
      (at >= killedAt && at <= killedAt + takeoverMs + 1_000) ||
      (at >= valkeyKilledAt && at <= valkeyKilledAt + downMs + 2_000);
    const steady = lags.filter((l) => !inFault(l));
    const [lag, lagAll] = [lagOf(steady, never), lagOf(lags, never)];
    const lagBound = args['lag-p99-ms'];
    // -log10(stale / reads): six nines is one stale read per million.
    const nines = (n: number) => (n ? round(-Math.log10(n / reads), 2) : '∞');
    const staleRows = stale.map((n, i) => [`${BOUNDS_MS[i]} ms`, n, nines(n)]);
    const lagLine = (l: typeof lag) =>
      `${l.p50Ms} / ${l.p99Ms} / ${l.maxMs} ms (${l.measured} commits)`;
    return {
      title: `consistency drill: ${args.instances} instances, ${args.rows} rows, ${args.seconds} s, consumer SIGKILLed once, Valkey restarted once`,
      body: [columns(staleRows, ['stale after commit', 'reads', 'nines'])],
      figures: {
        'reads / read errors / commits': `${reads} / ${readErrors} / ${committedAt.size}`,
        'invalidation lag p50 / p99 / max, every commit': lagLine(lagAll),
        'Valkey down (kill → answers)': `${round(downMs, 0)} ms`,
      },
      ...{ reads, readErrors, stale, lag, lagAll, takeoverMs, downMs, lost },
      checks: [
        law('reads stale more than 1 s after a commit', stale[BOUNDS_MS.indexOf(1_000)] ?? 0, 0),
        law(
          'invalidation lag p50 / p99 / max, outside the faults',
          lagLine(lag),
          `p99 ≤ ${lagBound} ms`,
          lag.p99Ms <= lagBound,
        ),
        law('commits that never reached every instance', never, 0),
        law(
          'new consumer reading after SIGKILL',
          `${round(takeoverMs, 0)} ms`,
          '≤ 3000 ms',
          !(takeoverMs > 3_000),
        ),
        law('lost invalidations (stale at the end)', lost, 0),
      ],
    };
  } finally {
    await Promise.all(services.map((s) => s.stop(2_000)));
    await agent.close();
    await admin.end();
    await valkey.stop();
    await db.stop();
  }
});

/** Lag figures of commit → no instance serves an older version, ms. */
function lagOf(lags: Array<{ ms: number }>, never: number) {
  const ms = lags.map((l) => l.ms);
  return { ...p50p99(ms, 1), maxMs: round(Math.max(0, ...ms), 1), measured: ms.length, never };
}

/** The index of the one instance reading the slot (its `echostore_changes_holder` is 1), once there is one. */
async function holderOf(services: Service[], withinMs: number): Promise<number> {
  const holds = async (s: Service) =>
    metric(await scrape(s.url), 'echostore_changes_holder', { stream: SLOT }) === 1;
  const deadline = performance.now() + withinMs;
  while (performance.now() < deadline) {
    const i = (await Promise.all(services.map((s) => holds(s).catch(() => false)))).indexOf(true);
    if (i >= 0) return i;
    await sleep(20);
  }
  throw new Error(`no instance read the change stream within ${withinMs} ms`);
}
