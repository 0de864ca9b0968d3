import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { HOLD_PREFIX, startOrigin } from '../harness/origin.js';
import { DEMO_QUERY } from '../src/config/load.js';
import { ShedError } from '../src/errors.js';
import type { Table } from '../src/store/table.js';
import type { ReadResult } from '../src/store/types.js';
import { readIds } from '../src/warm/read-ids.js';
import { startServiceProcess } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

/** One sample of `name{labels}` in Prometheus text; undefined when absent. */
function sample(
  text: string,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const want = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(',');
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m?.[1] === name && (m[2] ?? '').split(',').sort().join(',') === want) return Number(m[3]);
  }
  return undefined;
}

type ServiceProcess = Awaited<ReturnType<typeof startServiceProcess>>;
type LogLine = ReturnType<ServiceProcess['logs']>[number];

/** The service's first log line that `match` accepts, once its stdout (a pipe) has brought it. */
function logLine(service: ServiceProcess, match: (line: LogLine) => boolean): Promise<LogLine> {
  return vi.waitFor(() => {
    const line = service.logs().find(match);
    expect(line).toBeDefined();
    return line as LogLine;
  });
}

const readyz = async (url: string) => {
  const r = await fetch(`${url}/readyz`);
  return { status: r.status, body: (await r.json()) as { status: string } };
};

describe('warm-up at start', () => {
  it('reads the listed ids before /readyz says ready, and exports the progress', async () => {
    const origin = await startOrigin(300);
    try {
      const table = uniqueTable('warm-ids');
      const ids = Array.from({ length: 12 }, (_, i) => `w${i}`);
      const service = await startServiceProcess({
        valkey: { url: valkeyUrl() },
        tables: {
          [table]: {
            source: { kind: 'http', url: origin.template },
            warm: { ids, concurrency: 4 },
          },
        },
      });
      // 12 reads of 300 ms, 4 at a time: about 900 ms of warming.
      const early = await readyz(service.url);
      expect(early).toMatchObject({ status: 503, body: { status: 'warming' } });
      const during = await (await fetch(`${service.url}/metrics`)).text();
      expect(sample(during, 'echostore_warmup_running')).toBe(1);
      expect(sample(during, 'echostore_warmup_ids', { table })).toBe(12);

      await vi.waitFor(async () => expect((await readyz(service.url)).status).toBe(200), {
        timeout: 10_000,
        interval: 50,
      });
      for (const id of ids) expect(origin.readsOf(id)).toBe(1);
      const hit = await fetch(`${service.url}/v1/tables/${table}/items/w7`);
      expect(hit.headers.get('cache-status')).toMatch(/detail=l1$/);
      expect(origin.readsOf('w7')).toBe(1);

      const after = await (await fetch(`${service.url}/metrics`)).text();
      expect(sample(after, 'echostore_warmup_running')).toBe(0);
      expect(sample(after, 'echostore_warmup_reads_total', { table, result: 'warmed' })).toBe(12);
      expect(sample(after, 'echostore_warmup_reads_total', { table, result: 'failed' })).toBe(0);
      const done = await logLine(service, (l) => l.msg === 'warm-up done');
      expect(done).toMatchObject({ table, done: 12, total: 12, warmed: 12, failed: 0, skipped: 0 });
      expect(await logLine(service, (l) => l.msg === 'warm-up started')).toMatchObject({
        table,
        total: 12,
        concurrency: 4,
      });
    } finally {
      await origin.close();
    }
  });

  it('reads ids from a file and from the source (top N), counting not-found and failed ids', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'echostore-warm-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'ids.txt'), '1\r\n2\n\n99999\nnot-a-number\n');
    const [fromFile, fromTop] = [uniqueTable('warm-file'), uniqueTable('warm-top')];
    const sqlite = { kind: 'sqlite', file: 'demo.sqlite', query: DEMO_QUERY, seed: 'demo' };
    const service = await startServiceProcess(
      {
        valkey: { url: valkeyUrl() },
        tables: {
          [fromFile]: { source: sqlite, idPattern: '^[0-9]+$', warm: { file: 'ids.txt' } },
          [fromTop]: {
            source: {
              ...sqlite,
              idsQuery: 'SELECT id FROM products ORDER BY id DESC LIMIT :limit',
            },
            warm: { top: 5 },
          },
        },
      },
      { dir },
    );
    await vi.waitFor(async () => expect((await readyz(service.url)).status).toBe(200), {
      timeout: 10_000,
      interval: 50,
    });
    const text = await (await fetch(`${service.url}/metrics`)).text();
    const reads = (table: string, result: string) =>
      sample(text, 'echostore_warmup_reads_total', { table, result });
    expect(sample(text, 'echostore_warmup_ids', { table: fromFile })).toBe(4);
    expect(reads(fromFile, 'warmed')).toBe(2);
    expect(reads(fromFile, 'not_found')).toBe(1);
    expect(reads(fromFile, 'failed')).toBe(1);
    expect(sample(text, 'echostore_warmup_ids', { table: fromTop })).toBe(5);
    expect(reads(fromTop, 'warmed')).toBe(5);
    const top = await fetch(`${service.url}/v1/tables/${fromTop}/items/9996`);
    expect(top.headers.get('cache-status')).toMatch(/detail=l1$/);
    const done = await logLine(service, (l) => l.msg === 'warm-up done' && l.table === fromFile);
    expect(done).toMatchObject({ level: 40, failed: 1, codes: { ECC_BAD_ID: 1 } });
  });

  it('gives up after warm.timeoutMs, counts what it skipped, and becomes ready', async () => {
    const origin = await startOrigin(0);
    try {
      const table = uniqueTable('warm-slow');
      const ids = Array.from({ length: 6 }, (_, i) => `${HOLD_PREFIX}${i}`);
      const service = await startServiceProcess({
        valkey: { url: valkeyUrl() },
        tables: {
          [table]: {
            source: { kind: 'http', url: origin.template },
            warm: { ids, concurrency: 2, timeoutMs: 400 },
          },
        },
      });
      await vi.waitFor(async () => expect((await readyz(service.url)).status).toBe(200), {
        timeout: 10_000,
        interval: 50,
      });
      const text = await (await fetch(`${service.url}/metrics`)).text();
      // Two reads were held open past the deadline, four never started: none is done.
      expect(sample(text, 'echostore_warmup_reads_total', { table, result: 'skipped' })).toBe(6);
      expect(sample(text, 'echostore_warmup_reads_total', { table, result: 'failed' })).toBe(0);
      expect(origin.totalReads()).toBe(2);
      const done = await logLine(service, (l) => l.msg === 'warm-up done');
      expect(done).toMatchObject({ level: 40, done: 0, skipped: 6 });
      expect(done.ms).toBeLessThan(2_000);
    } finally {
      await origin.close();
    }
  });

  it('refuses a warm section that cannot work, naming the field (exit code 2)', async () => {
    const origin = `http://127.0.0.1:9/items/{id}`;
    const cases: [object, RegExp][] = [
      [{ ids: ['1'], top: 3 }, /tables\.t\.warm: must name exactly one of ids, file, top/],
      [{ top: 3 }, /tables\.t\.warm\.top: the table's source cannot list ids/],
      [{ file: 'no-such-file.txt' }, /tables\.t\.warm\.file: cannot read/],
    ];
    const dir = mkdtempSync(join(tmpdir(), 'echostore-warm-bad-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const main = new URL('../dist/src/main.js', import.meta.url).pathname;
    // The three starts at once: each is a whole process start, seconds on a loaded machine.
    const refused = cases.map(async ([warm, message], i) => {
      const file = join(dir, `config-${i}.json`);
      writeFileSync(
        file,
        JSON.stringify({ tables: { t: { source: { kind: 'http', url: origin }, warm } } }),
      );
      const child = spawn(process.execPath, [main, '--config', file], {
        env: { ...process.env, VALKEY_URL: valkeyUrl(), PORT: '0' },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      onTestFinished(() => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      });
      let stderr = '';
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
        stderr += chunk;
      });
      const [code] = (await once(child, 'exit')) as [number | null];
      expect(code, stderr).toBe(2);
      expect(stderr).toMatch(message);
    });
    await Promise.all(refused);
  }, 60_000);
});

describe('readIds (the warm-up loop)', () => {
  /** A table whose reads of each id are shed `sheds` times, then answered. */
  const shedding = (sheds: number) => {
    const seen = new Map<string, number>();
    return {
      name: 'fake',
      get: async (id: string) => {
        const n = (seen.get(id) ?? 0) + 1;
        seen.set(id, n);
        if (n <= sheds) throw new ShedError('shed', { retryAfterMs: 5 });
        return { found: true } as ReadResult;
      },
    } as unknown as Table;
  };
  const log = pino({ level: 'silent' });

  it('retries an id shed with ECC_SHED after its Retry-After, up to shedRetries times', async () => {
    let retries = 0;
    const ok = await readIds(shedding(2), ['a', 'b'], log, {
      concurrency: 2,
      shedRetries: 3,
      onRetry: () => retries++,
    });
    expect(ok).toEqual({ warmed: 2, notFound: 0, failed: [] });
    expect(retries).toBe(4);
    const gaveUp = await readIds(shedding(5), ['a'], log, { concurrency: 1, shedRetries: 3 });
    expect(gaveUp.failed).toEqual([{ id: 'a', code: 'ECC_SHED' }]);
  });

  it('starts no further id once its signal is aborted', async () => {
    const controller = new AbortController();
    const settled: string[] = [];
    const answer = await readIds(shedding(0), ['a', 'b', 'c'], log, {
      concurrency: 1,
      signal: controller.signal,
      onSettled: (id) => {
        settled.push(id);
        controller.abort();
      },
    });
    expect(settled).toEqual(['a']);
    expect(answer.warmed).toBe(1);
  });
});
