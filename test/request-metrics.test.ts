import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, parseMetrics } from '../harness/metrics.js';
import { type Origin, startOrigin } from '../harness/origin.js';
import { packageVersion } from '../src/process-metrics.js';
import { requirePromtool } from './helpers/promtool.js';
import { type ServiceProcess, startServiceProcess } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

/** The value of the first sample of `/metrics` text named `name` whose labels include `labels`, else undefined. */
const sample = (text: string, name: string, labels: Record<string, string>) =>
  metric(parseMetrics(text), name, labels);

/** Requests, errors and durations of the real service (RED), its build info, and its access log. */
describe('request metrics and access log', () => {
  const table = uniqueTable('red');
  let origin: Origin;
  let service: ServiceProcess;
  const metrics = async () => (await fetch(`${service.url}/metrics`)).text();

  beforeAll(async () => {
    origin = await startOrigin(1);
    service = await startServiceProcess(
      {
        valkey: { url: valkeyUrl() },
        log: { accessSampleRate: 1 },
        tables: { [table]: { source: { kind: 'http', url: origin.template } } },
      },
      { inHook: true },
    );
  });
  afterAll(async () => {
    service?.process.kill('SIGKILL');
    await origin?.close();
  });

  it('counts requests by route pattern and status class, never by raw URL', async () => {
    for (const id of ['a', 'b', 'c']) await fetch(`${service.url}/v1/tables/${table}/items/${id}`);
    await fetch(`${service.url}/v1/tables/${table}/items/%E2%80%AE`); // 400 ECC_BAD_ID
    await fetch(`${service.url}/no/such/route/1`);
    await fetch(`${service.url}/no/such/route/2`);
    const text = await metrics();
    const route = '/v1/tables/:table/items/:id';
    const count = (labels: Record<string, string>) =>
      sample(text, 'http_request_duration_seconds_count', labels);
    expect(count({ method: 'GET', route, code: '2xx' })).toBe(3);
    expect(count({ method: 'GET', route, code: '4xx' })).toBe(1);
    expect(count({ method: 'GET', route: 'unmatched', code: '4xx' })).toBe(2);
    expect(text).not.toContain('/no/such/route');
    expect(text).not.toMatch(/route="[^"]*\/items\/a"/);
    // The histogram has buckets below a millisecond (an L1 hit) and up to seconds (a load).
    expect(text).toMatch(/http_request_duration_seconds_bucket\{le="0.0005",method="GET"/);
    expect(origin.totalReads()).toBe(3); // at the source: the three ids, each loaded once
  });

  it('exports echostore_build_info with the package and Node.js versions', async () => {
    const text = await metrics();
    expect(
      sample(text, 'echostore_build_info', {
        version: packageVersion(),
        node_version: process.versions.node,
      }),
    ).toBe(1);
    expect(packageVersion()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('exports every known load error code and Valkey op at 0 before the first event', async () => {
    const text = await metrics();
    for (const code of ['ECC_LOAD_FAILED', 'ECC_LOAD_TIMEOUT', 'ECC_BAD_VALUE']) {
      expect(sample(text, 'echostore_load_errors_total', { table, code }), code).toBe(0);
    }
    for (const op of ['lease', 'fill', 'put', 'del']) {
      expect(sample(text, 'echostore_valkey_errors_total', { table, op }), op).toBe(0);
    }
    for (const op of ['put', 'del']) {
      expect(sample(text, 'echostore_writes_refused_total', { table, op }), op).toBe(0);
    }
    for (const op of ['get', 'lease', 'fill', 'put', 'del', 'forget']) {
      expect(sample(text, 'echostore_valkey_retries_total', { table, op }), op).toBe(0);
    }
  });

  it('passes promtool check metrics (no gauge named _total)', (ctx) => {
    requirePromtool(ctx, 'request-metrics.test.ts');
    return metrics().then((text) => {
      expect(text).not.toContain('nodejs_active_handles_total');
      expect(text).toContain('nodejs_active_handles{');
      // Exits non-zero (3 for lint problems) on any finding: execFileSync throws then.
      const out = execFileSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
      expect(out).toBe('');
    });
  });

  it('logs one access line per request, with the route pattern and status', async () => {
    await fetch(`${service.url}/v1/tables/${table}/items/logged`);
    await expect
      .poll(() =>
        service.logs().some((l) => l.msg === 'request' && String(l.url).endsWith('/logged')),
      )
      .toBe(true);
    const lines = service
      .logs()
      .filter((l) => l.msg === 'request' && String(l.url).endsWith('/logged'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 30,
      method: 'GET',
      route: '/v1/tables/:table/items/:id',
      statusCode: 200,
    });
    expect(typeof lines[0]?.responseTimeMs).toBe('number');
  });
});
