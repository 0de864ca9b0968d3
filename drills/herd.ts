/**
 * Herd drill: N concurrent cold readers of one id, in-process or over HTTP → 1 source read
 * (counted by the origin), N−1 coalesced, 1 distinct answer. Usage and laws: drills/README.md#herd.
 */
import { randomBytes } from 'node:crypto';
import { metric, scrape } from '../harness/metrics.js';
import { type Origin, startOrigin } from '../harness/origin.js';
import { type Service, startService, withServices } from '../harness/service.js';
import { burst, httpRead, storeRead } from './lib/burst.js';
import { drillArgs, flag, float, int, oneOf, runDrill, valkeyOption } from './lib/cli.js';
import { itemUrl } from './lib/http.js';
import { columns, p50p99 } from './lib/report.js';
import { dropId, originConfig, originStore } from './lib/store.js';
import { type DrillValkey, drillValkey } from './lib/valkey-target.js';

const args = drillArgs({
  readers: int(200, 1),
  'latency-ms': float(50, 0),
  via: oneOf('inproc', 'http'),
  valkey: valkeyOption(),
  cluster: flag(),
  secure: flag(),
});

const TABLE = 'herd';

/** The readers call `table.get` on one store in this process; `coalesced` from its stats. */
async function inProcess(valkey: DrillValkey, origin: Origin, id: string) {
  const { store, close } = await originStore(valkey.target, TABLE, origin.template);
  try {
    const t = store.table(TABLE);
    return { ...(await burst(storeRead(t, id), args.readers)), coalesced: t.stats().coalesced };
  } finally {
    await close();
  }
}

/** The readers GET one service instance; `coalesced` from its `/metrics`. */
async function viaHttp(valkey: DrillValkey, origin: Origin, id: string) {
  const config = originConfig(valkey.section, TABLE, origin.template);
  return withServices([startService(config)], async ([service]) => {
    const url = (service as Service).url;
    const result = await burst(httpRead(itemUrl(url, TABLE, id)), args.readers);
    const coalesced = metric(await scrape(url), 'echostore_coalesced_total', { table: TABLE }) ?? 0;
    return { ...result, coalesced };
  });
}

async function main() {
  const { readers, via } = args;
  const id = `herd-${Date.now()}-${randomBytes(4).toString('hex')}`;
  const valkey = await drillValkey(args.valkey, args.cluster, args.secure);
  let run: Awaited<ReturnType<typeof inProcess>>;
  let origin: Origin | undefined;
  try {
    await dropId(valkey.admin, TABLE, id);
    origin = await startOrigin(args['latency-ms']);
    run = via === 'http' ? await viaHttp(valkey, origin, id) : await inProcess(valkey, origin, id);
  } finally {
    await origin?.close();
    await dropId(valkey.admin, TABLE, id).catch(() => {});
    await valkey.close();
  }
  const sourceReads = origin.readsOf(id);
  const distinctAnswers = run.answers.length;
  // In-process every reader is in the mailbox before the flight lands, so all
  // but one coalesce. Over HTTP a late request may be an L1 hit instead, which
  // is equally lawful: the law is one source read and one answer.
  const coalescedOk = via === 'inproc' ? run.coalesced === readers - 1 : true;
  return {
    drill: 'herd',
    via,
    valkey: valkey.label,
    readers,
    sourceLatencyMs: args['latency-ms'],
    sourceReads,
    coalesced: run.coalesced,
    distinctAnswers,
    failures: run.failures,
    ...p50p99(run.latenciesMs, 1),
    pass: sourceReads === 1 && distinctAnswers === 1 && run.failures === 0 && coalescedOk,
  };
}

function render(r: Awaited<ReturnType<typeof main>>): string {
  const law =
    r.via === 'inproc'
      ? `law: ${r.readers - 1}`
      : `expected ${r.readers - 1}; the rest are L1 hits`;
  const table = columns([
    ['readers', r.readers],
    ['source reads (counted by the source)', `${r.sourceReads}   (law: 1)`],
    ['coalesced waiters', `${r.coalesced}   (${law})`],
    ['distinct answers', `${r.distinctAnswers}   (law: 1)`],
    ['failed readers', `${r.failures}   (law: 0)`],
    ['latency p50', `${r.p50Ms} ms`],
    ['latency p99', `${r.p99Ms} ms`],
  ]);
  return `herd drill (${r.via}): ${r.readers} concurrent cold readers, source latency ${r.sourceLatencyMs} ms, on ${r.valkey}\n${table}\n${r.pass ? 'PASS' : 'FAIL'}: the coalescing law ${r.pass ? 'holds' : 'is broken'}\n`;
}

runDrill('herd', args.json, main, render);
