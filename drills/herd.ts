/**
 * Herd drill: N concurrent cold readers of one id → the source counts 1 read,
 * N−1 readers coalesced, 1 distinct answer.
 *
 *   npm run drill:herd -- [--readers 200] [--latency-ms 50] [--via inproc|http] [--json [file]]
 *
 * Needs a live Valkey/Redis at `--valkey` or `VALKEY_URL` (default redis://127.0.0.1:6379).
 * The source is an HTTP origin started here that counts its own reads; the
 * law is judged by that count. Exits 1 when the law does not hold.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { type Origin, startOrigin } from '../harness/origin.js';
import { httpSource } from '../src/sources/http.js';
import { createStore } from '../src/store/store.js';
import { drillArgs, emitJson } from './lib/args.js';
import { percentile, table } from './lib/report.js';
import { scrape, startService } from './lib/service.js';

const args = drillArgs({
  readers: { type: 'string', default: '200' },
  'latency-ms': { type: 'string', default: '50' },
  via: { type: 'string', default: 'inproc' },
  valkey: { type: 'string', default: process.env.VALKEY_URL ?? 'redis://127.0.0.1:6379' },
});

const TABLE = 'herd';

interface Run {
  answers: string[];
  failures: number;
  latenciesMs: number[];
  coalesced: number;
}

async function inProcess(
  origin: Origin,
  valkey: string,
  readers: number,
  id: string,
): Promise<Run> {
  const source = httpSource({ url: origin.template, timeoutMs: 10_000 });
  const store = await createStore({ valkey, tables: { [TABLE]: { load: source.load } } });
  try {
    const t = store.table(TABLE);
    const started = performance.now();
    const settled = await Promise.allSettled(
      Array.from({ length: readers }, () =>
        t.get(id).then((r) => ({ r, ms: performance.now() - started })),
      ),
    );
    return collect(
      settled.map((s) =>
        s.status === 'fulfilled'
          ? { body: s.value.r.found ? s.value.r.json : '404', ms: s.value.ms }
          : undefined,
      ),
      t.stats().coalesced,
    );
  } finally {
    await store.close();
    source.close();
  }
}

async function viaHttp(origin: Origin, valkey: string, readers: number, id: string): Promise<Run> {
  const service = await startService({
    valkey: { url: valkey },
    tables: { [TABLE]: { source: { kind: 'http', url: origin.template } } },
  });
  try {
    const url = `${service.url}/v1/tables/${TABLE}/items/${encodeURIComponent(id)}`;
    const started = performance.now();
    const settled = await Promise.allSettled(
      Array.from({ length: readers }, async () => {
        const res = await fetch(url);
        const body = await res.text();
        return res.status === 200 ? { body, ms: performance.now() - started } : undefined;
      }),
    );
    const coalesced = await scrape(service.url, 'echostore_coalesced_total', { table: TABLE });
    return collect(
      settled.map((s) => (s.status === 'fulfilled' ? s.value : undefined)),
      coalesced,
    );
  } finally {
    await service.stop();
  }
}

function collect(results: Array<{ body: string; ms: number } | undefined>, coalesced: number): Run {
  const ok = results.filter((r) => r !== undefined);
  return {
    answers: ok.map((r) => r.body),
    failures: results.length - ok.length,
    latenciesMs: ok.map((r) => r.ms),
    coalesced,
  };
}

async function main(): Promise<number> {
  const readers = Number(args.readers);
  const latencyMs = Number(args['latency-ms']);
  const via = args.via;
  if (!Number.isInteger(readers) || readers < 1 || !Number.isFinite(latencyMs) || latencyMs < 0) {
    throw new Error('--readers must be a positive integer and --latency-ms a non-negative number');
  }
  if (via !== 'inproc' && via !== 'http') throw new Error('--via must be inproc or http');
  const valkey = args.valkey as string;
  const id = `herd-${Date.now()}-${randomBytes(4).toString('hex')}`;
  const admin = new Redis(valkey, { maxRetriesPerRequest: 1, connectTimeout: 3_000 });
  await admin.del(`ecc:${TABLE}:{${id}}`, `ecc:${TABLE}:{${id}}:lease`);
  const origin = await startOrigin(latencyMs);
  let run: Run;
  try {
    run =
      via === 'http'
        ? await viaHttp(origin, valkey, readers, id)
        : await inProcess(origin, valkey, readers, id);
  } finally {
    await origin.close();
    await admin.del(`ecc:${TABLE}:{${id}}`);
    admin.disconnect();
  }
  const sourceReads = origin.readsOf(id);
  const distinct = new Set(run.answers).size;
  // In-process every reader is in the mailbox before the flight lands, so all
  // but one coalesce. Over HTTP a late request may be an L1 hit instead, which
  // is equally lawful: the law is one source read and one answer.
  const coalescedOk = via === 'inproc' ? run.coalesced === readers - 1 : true;
  const pass = sourceReads === 1 && distinct === 1 && run.failures === 0 && coalescedOk;
  const report = {
    drill: 'herd',
    via,
    readers,
    sourceLatencyMs: latencyMs,
    sourceReads,
    coalesced: run.coalesced,
    distinctAnswers: distinct,
    failures: run.failures,
    p50Ms: Number(percentile(run.latenciesMs, 50).toFixed(1)),
    p99Ms: Number(percentile(run.latenciesMs, 99).toFixed(1)),
    pass,
  };
  if (!emitJson(args.json, report)) {
    process.stdout.write(
      `herd drill (${via}): ${readers} concurrent cold readers, source latency ${latencyMs} ms\n${table(
        [
          ['readers', readers],
          ['source reads (counted by the source)', `${sourceReads}   (law: 1)`],
          [
            'coalesced waiters',
            `${run.coalesced}   (${via === 'inproc' ? `law: ${readers - 1}` : `expected ${readers - 1}; the rest are L1 hits`})`,
          ],
          ['distinct answers', `${distinct}   (law: 1)`],
          ['failed readers', `${run.failures}   (law: 0)`],
          ['latency p50', `${report.p50Ms} ms`],
          ['latency p99', `${report.p99Ms} ms`],
        ],
      )}\n${pass ? 'PASS' : 'FAIL'}: the coalescing law ${pass ? 'holds' : 'is broken'}\n`,
    );
  }
  return pass ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`herd drill failed to run: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(2);
  },
);
