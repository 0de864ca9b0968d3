/**
 * Huge-batch drill: one batchGet of 1,000 ids whose big rows are in L2, while /healthz is polled
 * → 0 source reads, never degraded, /healthz within 100 ms. Usage and laws: drills/README.md#huge-batch.
 */
import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { startOrigin } from '../harness/origin.js';
import { plantRows } from '../harness/plant-rows.js';
import { startService, withServices } from '../harness/service.js';
import { spawnValkey } from '../harness/valkey-server.js';
import { sourceFingerprint } from '../src/sources/fingerprint.js';
import { drillArgs, int, runDrill } from './lib/cli.js';
import { readyz, timed } from './lib/http.js';
import { law, percentile, round } from './lib/report.js';

const args = drillArgs({
  ids: int(1_000, 1, 1_000),
  'row-kb': int(300, 1, 2_000),
  'command-timeout-ms': int(1_000, 50, 60_000),
});
const TABLE = 'huge';
const ids = Array.from({ length: args.ids }, (_, i) => String(i));
/** Rows read before the measured batch, to warm the service up; not part of it. */
const WARM_IDS = ['warm-1', 'warm-2', 'warm-3', 'warm-4'];
/** The bound on every `/healthz` answer while the batch runs, ms. */
const HEALTHZ_MS = 100;

/**
 * The batch over a socket: its status and body as received, in pieces. Joining 64 MiB takes this
 * process tens of milliseconds, and the poller shares its event loop: the pieces are joined and
 * counted only after polling stops, so that the drill times the service, not itself.
 */
function batchGet(base: string, ids: string[]): Promise<{ status: number; body: Buffer[] }> {
  const options = { method: 'POST', headers: { 'content-type': 'application/json' } };
  return new Promise((resolve, reject) => {
    const req = request(`${base}/v1/tables/${TABLE}/items:batchGet`, options, (res) => {
      const body: Buffer[] = [];
      res.on('data', (c: Buffer) => body.push(c));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end(JSON.stringify({ ids }));
  });
}

runDrill('huge-batch', args.json, async () => {
  const valkey = await spawnValkey();
  const origin = await startOrigin(5);
  const source = { kind: 'http' as const, url: origin.template };
  const section = { url: valkey.url, commandTimeoutMs: args['command-timeout-ms'] };
  const config = { valkey: section, tables: { [TABLE]: { source } } };
  try {
    // The rows in L2 as the service's source would have written them (its fingerprint).
    const raw = new Redis(valkey.url, { maxRetriesPerRequest: 1 });
    const row = { rowBytes: args['row-kb'] * 1_000, ttlMs: 3_600_000 };
    const fingerprint = sourceFingerprint(source);
    await plantRows(raw, TABLE, [...ids, ...WARM_IDS], { ...row, fingerprint });
    raw.disconnect();
    return await withServices([startService(config)], async ([service]) => {
      const url = service?.url as string;
      // Warm up first (the scripts' first load, JIT): a few rows not in the batch, and the routes.
      await batchGet(url, WARM_IDS);
      for (let i = 0; i < 5; i++) await fetch(`${url}/healthz`).then((r) => r.arrayBuffer());
      // /healthz and /readyz from their own connections, every 10 ms, while the batch runs.
      const healthzMs: number[] = [];
      let [degraded, polling] = [0, true];
      const poll = (async () => {
        while (polling) {
          healthzMs.push((await timed(`${url}/healthz`, 5_000)).ms);
          if ((await readyz(url)).status === 'degraded') degraded++;
          await sleep(10);
        }
      })();
      const started = performance.now();
      const answer = await batchGet(url, ids);
      const batchMs = round(performance.now() - started);
      await sleep(200);
      polling = false;
      await poll;
      type Item = { status: string; error?: { code: string } };
      const { items = [] }: { items?: Item[] } =
        answer.status === 200 ? JSON.parse(Buffer.concat(answer.body).toString()) : {};
      const found = items.filter((x) => x.status === 'found').length;
      const tooLarge = items.filter((x) => x.error?.code === 'ECC_BATCH_TOO_LARGE').length;
      const other = items.length - found - tooLarge;
      const healthzMaxMs = round(Math.max(...healthzMs));
      return {
        title: `huge-batch drill: one batchGet of ${args.ids} ids, ${args['row-kb']} KB rows in L2, commandTimeoutMs ${args['command-timeout-ms']}`,
        figures: {
          'answer size (MiB)': round(answer.body.reduce((n, c) => n + c.length, 0) / 1024 / 1024),
          'batch duration (ms)': batchMs,
          '/healthz polls, p99 (ms)': `${healthzMs.length}, ${round(percentile(healthzMs, 99))}`,
        },
        checks: [
          law('answer status', answer.status, 200),
          law(
            'found / ECC_BATCH_TOO_LARGE / other',
            `${found} / ${tooLarge} / ${other}`,
            `found > 0, other 0, ${args.ids} in all`,
            found > 0 && other === 0 && found + tooLarge === args.ids,
          ),
          law('source reads (counted at the origin)', origin.totalReads(), 0),
          law('/readyz polls that said degraded', degraded, 0),
          law('/healthz max (ms)', healthzMaxMs, `≤ ${HEALTHZ_MS}`, healthzMaxMs <= HEALTHZ_MS),
        ],
      };
    });
  } finally {
    await origin.close();
    await valkey.stop();
  }
});
