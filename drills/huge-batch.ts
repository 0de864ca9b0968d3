/**
 * Huge-batch drill: one batchGet of 1,000 ids whose big rows are in L2, while /healthz is polled
 * → 0 source reads, never degraded, /healthz within 100 ms. Usage and laws: drills/README.md#huge-batch.
 */
import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { startOrigin } from '../harness/origin.js';
import { plantRows } from '../harness/plant-rows.js';
import { startService } from '../harness/service.js';
import { spawnValkey } from '../harness/valkey-server.js';
import { sourceFingerprint } from '../src/sources/fingerprint.js';
import { drillArgs, int, runDrill } from './lib/cli.js';
import { readyz, timed } from './lib/http.js';
import { columns, percentile, round } from './lib/report.js';

const args = drillArgs({
  ids: int(1_000, 1, 1_000),
  'row-kb': int(300, 1, 2_000),
  'command-timeout-ms': int(1_000, 50, 60_000),
});

const TABLE = 'huge';
/** Rows read before the measured batch, to warm the service up; not part of it. */
const WARM_IDS = ['warm-1', 'warm-2', 'warm-3', 'warm-4'];
/** The law's bound on a `/healthz` answer during the batch. */
const HEALTHZ_BOUND_MS = 100;

/** Plants the rows in L2 as the service's source would have written them (its fingerprint). */
async function plant(url: string, fingerprint: string): Promise<void> {
  const raw = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    const ids = [...Array.from({ length: args.ids }, (_, i) => String(i)), ...WARM_IDS];
    await plantRows(raw, TABLE, ids, {
      rowBytes: args['row-kb'] * 1_000,
      ttlMs: 3_600_000,
      fingerprint,
    });
  } finally {
    raw.disconnect();
  }
}

/**
 * The batch over a socket: its status and body as received, in pieces. Joining 64 MiB takes this
 * process tens of milliseconds, and the poller shares its event loop: the pieces are joined and
 * counted only after polling stops, so that the drill times the service, not itself.
 */
function batchGet(base: string, ids: string[]): Promise<{ status: number; body: Buffer[] }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${base}/v1/tables/${TABLE}/items:batchGet`,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: chunks }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify({ ids }));
  });
}

/** The items of a 200 answer by status and code. */
function countItems(body: Buffer[]): { found: number; tooLarge: number; other: number } {
  const counts = { found: 0, tooLarge: 0, other: 0 };
  const { items } = JSON.parse(Buffer.concat(body).toString()) as {
    items: Array<{ status: string; error?: { code: string } }>;
  };
  for (const item of items) {
    if (item.status === 'found') counts.found++;
    else if (item.error?.code === 'ECC_BATCH_TOO_LARGE') counts.tooLarge++;
    else counts.other++;
  }
  return counts;
}

async function main() {
  const valkey = await spawnValkey();
  const origin = await startOrigin(5);
  try {
    const source = { kind: 'http' as const, url: origin.template };
    await plant(valkey.url, sourceFingerprint(source));
    const service = await startService({
      valkey: { url: valkey.url, commandTimeoutMs: args['command-timeout-ms'] },
      tables: { [TABLE]: { source } },
    });
    try {
      // Warm up first (the scripts' first load, JIT): a few rows not in the batch, and the routes.
      await batchGet(service.url, WARM_IDS);
      for (let i = 0; i < 5; i++)
        await fetch(`${service.url}/healthz`).then((r) => r.arrayBuffer());
      // /healthz and /readyz from their own connections, every 10 ms, while the batch runs.
      const healthzMs: number[] = [];
      let degraded = 0;
      let polling = true;
      const poll = (async () => {
        while (polling) {
          healthzMs.push((await timed(`${service.url}/healthz`, 5_000)).ms);
          if ((await readyz(service.url)).status === 'degraded') degraded++;
          await sleep(10);
        }
      })();
      const ids = Array.from({ length: args.ids }, (_, i) => String(i));
      const started = performance.now();
      const answer = await batchGet(service.url, ids);
      const batchMs = performance.now() - started;
      await sleep(200);
      polling = false;
      await poll;
      const counts =
        answer.status === 200 ? countItems(answer.body) : { found: 0, tooLarge: 0, other: 0 };
      const bytes = answer.body.reduce((n, c) => n + c.length, 0);
      const batch = { status: answer.status, bytes, ...counts };
      const sourceReads = origin.totalReads();
      const healthzMaxMs = Math.max(...healthzMs);
      const pass =
        batch.status === 200 &&
        batch.found + batch.tooLarge === args.ids &&
        batch.found > 0 &&
        sourceReads === 0 &&
        degraded === 0 &&
        healthzMaxMs <= HEALTHZ_BOUND_MS;
      return {
        pass,
        ids: args.ids,
        rowKb: args['row-kb'],
        commandTimeoutMs: args['command-timeout-ms'],
        status: batch.status,
        answerMiB: round(batch.bytes / 1024 / 1024),
        found: batch.found,
        tooLarge: batch.tooLarge,
        otherErrors: batch.other,
        sourceReads,
        degradedPolls: degraded,
        batchMs: round(batchMs),
        healthzPolls: healthzMs.length,
        healthzP99Ms: round(percentile(healthzMs, 99)),
        healthzMaxMs: round(healthzMaxMs),
      };
    } finally {
      await service.stop();
    }
  } finally {
    await origin.close();
    await valkey.stop();
  }
}

function render(r: Awaited<ReturnType<typeof main>>): string {
  return `huge-batch drill: one batchGet of ${r.ids} ids, ${r.rowKb} KB rows in L2, commandTimeoutMs ${r.commandTimeoutMs}
${columns([
  ['answer status', `${r.status}   (law: 200)`],
  ['answer size (MiB)', r.answerMiB],
  [
    'found / ECC_BATCH_TOO_LARGE / other',
    `${r.found} / ${r.tooLarge} / ${r.otherErrors}   (law: found > 0, other 0)`,
  ],
  ['source reads (counted at the origin)', `${r.sourceReads}   (law: 0)`],
  ['/readyz polls that said degraded', `${r.degradedPolls}   (law: 0)`],
  ['batch duration (ms)', r.batchMs],
  [
    '/healthz polls, p99, max (ms)',
    `${r.healthzPolls}, ${r.healthzP99Ms}, ${r.healthzMaxMs}   (law: max ≤ ${HEALTHZ_BOUND_MS})`,
  ],
])}
${r.pass ? 'PASS' : 'FAIL'}
`;
}

runDrill('huge-batch', args.json, main, render);
