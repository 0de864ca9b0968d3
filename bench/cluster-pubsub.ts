/**
 * Pub/Sub on a local 3+3 cluster: plain PUBLISH (the store's design) against sharded
 * SPUBLISH per slot: connections, subscriptions, bus messages and server CPU per message,
 * throughput, latency. Asserts nothing. Usage: drills/README.md#benchpubsub.
 */
import { Redis } from 'ioredis';
import { drillArgs, int, runDrill } from '../drills/lib/cli.js';
import { columns, p50p99, round } from '../drills/lib/report.js';
import { type LocalCluster, spawnCluster } from '../harness/cluster.js';
import { keySlot, SLOTS } from '../src/valkey/slots.js';

const args = drillArgs({ messages: int(20_000, 100, 10_000_000) });

/** A tag per slot: `{<tag>}` hashes to that slot. */
function slotTags(): string[] {
  const tags: string[] = new Array(SLOTS);
  let found = 0;
  for (let i = 0; found < SLOTS; i++) {
    const slot = keySlot(String(i));
    if (tags[slot] === undefined) {
      tags[slot] = String(i);
      found++;
    }
  }
  return tags;
}

type Stats = { bus: number; cpuMs: number };

/** Bus messages of `kind` sent and CPU used, summed over every node. */
async function nodeStats(cluster: LocalCluster, kind: 'publish' | 'publishshard'): Promise<Stats> {
  let bus = 0;
  let cpuMs = 0;
  for (const n of cluster.nodes) {
    const r = new Redis(n.port, '127.0.0.1');
    const info = (await r.cluster('INFO')) as string;
    const cpu = await r.info('cpu');
    r.disconnect();
    bus += Number(new RegExp(`cluster_stats_messages_${kind}_sent:(\\d+)`).exec(info)?.[1] ?? 0);
    for (const m of cpu.matchAll(/used_cpu_(?:sys|user):([\d.]+)/g)) cpuMs += Number(m[1]) * 1000;
  }
  return { bus, cpuMs };
}

/** Publishes `messages` stamped messages through `publish` and waits until `heard` counts them all. */
async function measure(
  cluster: LocalCluster,
  kind: 'publish' | 'publishshard',
  publish: (i: number, text: string) => Promise<unknown>,
  heard: { count: number; latencies: number[] },
) {
  const before = await nodeStats(cluster, kind);
  const started = performance.now();
  const inFlight = 64;
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let i = next++; i < args.messages; i = next++) {
        await publish(i, JSON.stringify({ k: 'fill', id: `id-${i}`, v: 1, at: performance.now() }));
      }
    }),
  );
  const publishMs = performance.now() - started;
  while (heard.count < args.messages && performance.now() - started < 60_000) {
    await new Promise((r) => setTimeout(r, 10));
  }
  const after = await nodeStats(cluster, kind);
  return {
    heard: heard.count,
    busPerMessage: round((after.bus - before.bus) / args.messages, 2),
    serverCpuUsPerMessage: round(((after.cpuMs - before.cpuMs) * 1000) / args.messages, 1),
    publishedPerSecond: Math.round(args.messages / (publishMs / 1000)),
    ...p50p99(heard.latencies, 2),
  };
}

async function main() {
  const cluster = await spawnCluster();
  const clients: Redis[] = [];
  const connect = (port: number) => {
    const r = new Redis(port, '127.0.0.1', { enableAutoPipelining: false });
    clients.push(r);
    return r;
  };
  try {
    const slots = await connect(cluster.nodes[0]?.port as number).cluster('SLOTS');
    const ownerPort = (slot: number) =>
      slots.find(([a, b]) => slot >= a && slot <= b)?.[2]?.[1] as number;
    const primaries = [...new Set(slots.map((s) => s[2]?.[1] as number))];
    const onMessage = (h: { count: number; latencies: number[] }) => (_: string, m: string) => {
      h.count++;
      h.latencies.push(performance.now() - (JSON.parse(m) as { at: number }).at);
    };

    // Plain PUBLISH: one SUBSCRIBE on one node hears every shard's messages.
    const plainHeard = { count: 0, latencies: [] as number[] };
    const sub = connect(primaries[0] as number);
    let t0 = performance.now();
    await sub.subscribe('ecc:events:bench');
    const plainSubscribeMs = performance.now() - t0;
    sub.on('message', onMessage(plainHeard));
    const pubs = new Map(primaries.map((p) => [p, connect(p)]));
    const tags = slotTags();
    // Each message is published on the primary of a random item's slot, as the fill scripts do.
    const publish = (i: number, text: string) =>
      (pubs.get(ownerPort(i % SLOTS)) as Redis).publish('ecc:events:bench', text);
    const plainRun = await measure(cluster, 'publish', publish, plainHeard);

    // Sharded: a channel per slot, SSUBSCRIBEd on the node that owns the slot.
    const shardHeard = { count: 0, latencies: [] as number[] };
    const ssubs = new Map(primaries.map((p) => [p, connect(p)]));
    t0 = performance.now();
    await Promise.all(
      tags.map((tag, slot) =>
        (ssubs.get(ownerPort(slot)) as Redis).ssubscribe(`ecc:events:bench:{${tag}}`),
      ),
    );
    const shardSubscribeMs = performance.now() - t0;
    for (const s of ssubs.values()) s.on('smessage', onMessage(shardHeard));
    const spublish = (i: number, text: string) =>
      (pubs.get(ownerPort(i % SLOTS)) as Redis).spublish(
        `ecc:events:bench:{${tags[i % SLOTS]}}`,
        text,
      );
    const shardRun = await measure(cluster, 'publishshard', spublish, shardHeard);
    const row = (design: (string | number)[], x: typeof plainRun) => [
      ...[...design, x.busPerMessage, x.serverCpuUsPerMessage],
      ...[x.publishedPerSecond, x.p50Ms, x.p99Ms, x.heard],
    ];
    const rows = [
      row(['PUBLISH (broadcast)', 1, 1, round(plainSubscribeMs, 1)], plainRun),
      row(['SPUBLISH (per slot)', primaries.length, SLOTS, round(shardSubscribeMs, 1)], shardRun),
    ];
    return {
      title: `cluster Pub/Sub on a local 3+3 cluster, one table, ${args.messages} messages`,
      body: [
        columns(rows, [
          ...['design', 'connections', 'subscriptions', 'subscribe ms', 'bus msgs / msg'],
          ...['server CPU µs / msg', 'published / s', 'p50 ms', 'p99 ms', 'heard'],
        ]),
      ],
      rows,
      checks: [],
    };
  } finally {
    for (const c of clients) c.disconnect();
    await cluster.stop();
  }
}

runDrill('cluster-pubsub', args.json, main);
