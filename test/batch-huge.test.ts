/**
 * One huge batch read must not take the instance down: 1,000 ids whose big
 * rows are in L2, on a Valkey server of this test's own. The rows are read in
 * waves bounded by bytes, so no command outlasts `commandTimeoutMs` and the
 * breaker stays closed for everyone; the answer is streamed, and ids past
 * `maxBatchBytes` get a coded 413 of their own.
 */
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it, onTestFinished } from 'vitest';
import { plantRows } from '../harness/plant-rows.js';
import { buildServer } from '../src/http/server.js';
import { openStore, scopedValkey } from './helpers/probe.js';
import { spawnServer } from './helpers/server.js';
import { uniqueTable } from './helpers/store.js';

const IDS = 1_000;

/** Writes `count` rows of `rowBytes` characters each straight into Valkey, as fresh envelopes. */
function plantCount(url: string, table: string, count: number, rowBytes: number) {
  const ids = Array.from({ length: count }, (_, i) => String(i));
  return plantRows(scopedValkey(url), table, ids, { rowBytes, ttlMs: 600_000 });
}

/** POSTs a batchGet over a real socket and reads the whole answer. */
function batchGet(
  port: number,
  table: string,
  ids: string[],
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: `/v1/tables/${table}/items:batchGet`,
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify({ ids }));
  });
}

/** A store on its own Valkey, its source counting reads, served over a real socket. */
async function service(rowBytes: number, commandTimeoutMs: number) {
  const server = await spawnServer();
  onTestFinished(() => server.stop());
  const table = uniqueTable('huge');
  await plantCount(server.url, table, IDS, rowBytes);
  const source = { reads: 0 };
  const store = await openStore(
    {
      [table]: {
        load: (id) => {
          source.reads++;
          return { id, from: 'source' };
        },
      },
    },
    { valkey: { url: server.url, commandTimeoutMs } },
  );
  const degraded: string[] = [];
  const watch = setInterval(() => {
    if (!store.valkeyReady()) degraded.push(String(store.valkeyHealth().degradedReason));
  }, 5);
  onTestFinished(() => clearInterval(watch));
  const app = buildServer({ store, logger: pino({ level: 'silent' }) });
  onTestFinished(() => app.close());
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as AddressInfo).port;
  return { table, port, source, degraded };
}

type Item = { id: string; status: string; value?: { id: string }; error?: { code: string } };

describe('a huge batch read', () => {
  it('1,000 ids of 300 KB rows in L2: no source read, the breaker stays closed, ids past the limit get 413', {
    timeout: 60_000,
  }, async () => {
    const { table, port, source, degraded } = await service(300_000, 1_000);
    const ids = Array.from({ length: IDS }, (_, i) => String(i));
    const answer = await batchGet(port, table, ids);
    expect(answer.status).toBe(200);
    const items = (JSON.parse(answer.body) as { items: Item[] }).items;
    expect(items.map((i) => i.id)).toEqual(ids);
    const found = items.filter((i) => i.status === 'found');
    // Every id answered from L2 up to the limit, each one its own row; the rest refused, coded.
    expect(found.length).toBeGreaterThan(100);
    for (const item of found) expect(item.value?.id).toBe(item.id);
    for (const item of items.slice(found.length)) {
      expect(item.status).toBe('error');
      expect(item.error?.code).toBe('ECC_BATCH_TOO_LARGE');
    }
    expect(source.reads).toBe(0);
    expect(degraded).toEqual([]);
  });

  it('1,000 ids of 600 KB rows: answered (not 500 ECC_INTERNAL), no source read, the breaker stays closed', {
    timeout: 60_000,
  }, async () => {
    const { table, port, source, degraded } = await service(600_000, 10_000);
    const ids = Array.from({ length: IDS }, (_, i) => String(i));
    const answer = await batchGet(port, table, ids);
    expect(answer.status).toBe(200);
    const items = (JSON.parse(answer.body) as { items: Item[] }).items;
    expect(items).toHaveLength(IDS);
    expect(items[0]).toMatchObject({ id: '0', status: 'found' });
    expect(items.at(-1)).toMatchObject({ status: 'error', error: { code: 'ECC_BATCH_TOO_LARGE' } });
    expect(source.reads).toBe(0);
    expect(degraded).toEqual([]);
  });
});
