/**
 * Herd drill: N concurrent cold readers of one id, in-process or over HTTP → 1 source read
 * (counted by the origin), N−1 coalesced, 1 distinct answer. Usage and laws: drills/README.md#herd.
 */
import { randomBytes } from 'node:crypto';
import { metric, scrape } from '../harness/metrics.js';
import { withOrigin } from '../harness/origin.js';
import { startService, withServices } from '../harness/service.js';
import { httpRead, readMany, storeRead } from './lib/burst.js';
import { drillArgs, fleetOptions, float, int, oneOf, runDrill } from './lib/cli.js';
import { law, p50p99 } from './lib/report.js';
import { drillValkey, originConfig, originStore } from './lib/store.js';

const args = drillArgs({
  readers: int(200, 1, 10_000),
  'latency-ms': float(50, 0, 2_000),
  via: oneOf('inproc', 'http'),
  ...fleetOptions(),
});
const { readers, via } = args;
const TABLE = 'herd';

runDrill('herd', args.json, async () => {
  const id = `herd-${Date.now()}-${randomBytes(4).toString('hex')}`;
  const valkey = await drillValkey(args.valkey, args.cluster, args.secure);
  try {
    const { run, sourceReads } = await withOrigin([args['latency-ms']], async (origin) => {
      if (via === 'inproc') {
        // The readers call `table.get` on one store in this process; `coalesced` from its stats.
        const { store, close } = await originStore(valkey.target, TABLE, origin.template);
        const t = store.table(TABLE);
        const result = await readMany(storeRead(t), () => id, readers);
        const run = { ...result, coalesced: t.stats().coalesced, hits: 0 };
        await close();
        return { run, sourceReads: origin.readsOf(id) };
      }
      // The readers GET one service instance; `coalesced` from its `/metrics`.
      const config = originConfig(valkey.section, TABLE, origin.template);
      const run = await withServices([startService(config)], async ([service]) => {
        const url = service?.url as string;
        const result = await readMany(httpRead(url, TABLE), () => id, readers);
        const samples = await scrape(url);
        const coalesced = metric(samples, 'echostore_coalesced_total', { table: TABLE }) ?? 0;
        const hits = metric(samples, 'echostore_reads_total', { table: TABLE, layer: 'l1' }) ?? 0;
        return { ...result, coalesced, hits };
      });
      return { run, sourceReads: origin.readsOf(id) };
    });
    const latency = p50p99(run.latenciesMs, 1);
    // In-process every reader is in the mailbox before the flight lands, so all but one
    // coalesce. Over HTTP a late request may be an L1 hit instead, which is equally lawful:
    // every reader but the loading one is one or the other.
    const coalesced =
      via === 'inproc'
        ? law('coalesced waiters', run.coalesced, readers - 1)
        : law(
            'coalesced waiters + L1 hits',
            `${run.coalesced} + ${run.hits}`,
            readers - 1,
            run.coalesced + run.hits === readers - 1,
          );
    return {
      title: `herd drill (${via}): ${readers} concurrent cold readers, source latency ${args['latency-ms']} ms, on ${valkey.label}`,
      figures: { readers, 'latency p50 / p99': `${latency.p50Ms} / ${latency.p99Ms} ms` },
      checks: [
        law('source reads (counted by the source)', sourceReads, 1),
        coalesced,
        law('distinct answers', run.answers[id]?.length ?? 0, 1),
        law('failed readers', run.failures, 0),
      ],
    };
  } finally {
    await valkey.drop(TABLE, [id]).catch(() => {});
    await valkey.close();
  }
});
