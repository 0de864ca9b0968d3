import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { startOrigin } from '../harness/origin.js';
import { type Service, startService } from '../harness/service.js';
import { resolveTraceExport } from '../src/config/otlp.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

/** One POST the collector received. */
interface Export {
  path: string;
  contentType: string;
  body: Buffer;
}

/** An OTLP/JSON attribute value (`AnyValue`): one of these is set. */
interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
}

/** A span of an OTLP/JSON export, as far as the test reads it. */
interface JsonSpan {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: Array<{ key: string; value: AnyValue }>;
}

interface JsonExport {
  resourceSpans: Array<{
    resource: { attributes: Array<{ key: string; value: AnyValue }> };
    scopeSpans: Array<{ scope: { name: string }; spans: JsonSpan[] }>;
  }>;
}

/** A tiny OTLP/HTTP receiver on loopback: it keeps every POST and answers 200 with an empty export response. */
async function startCollector() {
  const exports: Export[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (c: Buffer) => chunks.push(c));
    request.on('end', () => {
      const contentType = String(request.headers['content-type'] ?? '');
      exports.push({ path: request.url ?? '', contentType, body: Buffer.concat(chunks) });
      response.setHeader('content-type', contentType);
      response.end(contentType.includes('json') ? '{}' : '');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, exports };
}

/** No OTEL_* variable of the test's own environment reaches the service. */
const NO_OTEL = Object.fromEntries(
  Object.keys(process.env)
    .filter((k) => k.startsWith('OTEL_'))
    .map((k) => [k, '']),
);

const value = (v: AnyValue) => v.stringValue ?? v.boolValue ?? v.doubleValue ?? Number(v.intValue);
const attributes = (span: { attributes: Array<{ key: string; value: AnyValue }> }) =>
  Object.fromEntries(span.attributes.map((a) => [a.key, value(a.value)]));
const ms = (s: JsonSpan) => Number(BigInt(s.endTimeUnixNano) - BigInt(s.startTimeUnixNano)) / 1e6;

async function serve(config: object, env: Record<string, string>): Promise<Service> {
  const service = await startService(config, { env: { ...NO_OTEL, ...env } });
  onTestFinished(() => service.stop());
  return service;
}

describe('the service exports its traces over OTLP/HTTP', () => {
  it('one cold read through an HTTP origin reaches the collector at shutdown: the get span, its load, the caller’s trace (JSON)', async () => {
    const collector = await startCollector();
    const origin = await startOrigin(20);
    onTestFinished(() => origin.close());
    const table = uniqueTable('otlp');
    const service = await serve(
      {
        valkey: { url: valkeyUrl() },
        tracing: { endpoint: collector.url, protocol: 'http/json', ids: 'plain' },
        tables: { [table]: { source: { kind: 'http', url: origin.template } } },
      },
      // A batch would leave after a minute: what arrives is the shutdown's flush.
      { OTEL_BSP_SCHEDULE_DELAY: '60000' },
    );
    const traceId = randomBytes(16).toString('hex');
    const callerSpan = randomBytes(8).toString('hex');
    const started = performance.now();
    const r = await fetch(`${service.url}/v1/tables/${table}/items/42`, {
      headers: { traceparent: `00-${traceId}-${callerSpan}-01` },
    });
    const clientMs = performance.now() - started;
    expect(r.status).toBe(200);
    expect(origin.readsOf('42')).toBe(1);
    expect(collector.exports).toHaveLength(0);
    await service.stop();

    expect(collector.exports.length).toBeGreaterThan(0);
    for (const e of collector.exports) {
      expect(e.path).toBe('/v1/traces');
      expect(e.contentType).toContain('application/json');
    }
    const batches = collector.exports.map((e) => JSON.parse(e.body.toString('utf8')) as JsonExport);
    const resource = attributes(batches[0]?.resourceSpans[0]?.resource ?? { attributes: [] });
    expect(resource['service.name']).toBe('echostore');
    const spans = batches.flatMap((b) =>
      b.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans)),
    );
    const get = spans.find((s) => s.name === 'echostore.get');
    const load = spans.find((s) => s.name === 'echostore.load');
    if (get === undefined || load === undefined) throw new Error('no get or load span');
    expect(get.traceId).toBe(traceId);
    expect(get.parentSpanId).toBe(callerSpan);
    expect(load.traceId).toBe(traceId);
    expect(load.parentSpanId).toBe(get.spanId);
    expect(attributes(get)).toMatchObject({
      'echostore.table': table,
      'echostore.id': '42',
      'echostore.layer': 'origin',
      'echostore.hit': false,
      'echostore.found': true,
      'echostore.coalesced': false,
    });
    expect(attributes(load)).toMatchObject({
      'echostore.table': table,
      'echostore.id': '42',
      'echostore.found': true,
    });
    expect(ms(load)).toBeGreaterThanOrEqual(20); // the origin's latency
    expect(ms(get)).toBeGreaterThanOrEqual(ms(load));
    console.info(
      [
        `client GET ${clientMs.toFixed(2)} ms (traceparent ${traceId}-${callerSpan})`,
        `└─ echostore.get   ${ms(get).toFixed(2)} ms  ${JSON.stringify(attributes(get))}`,
        `   └─ echostore.load  ${ms(load).toFixed(2)} ms  ${JSON.stringify(attributes(load))}`,
      ].join('\n'),
    );
  });

  it('is started by the OTEL_* environment alone, protobuf by default, while the service runs', async () => {
    const collector = await startCollector();
    const origin = await startOrigin(5);
    onTestFinished(() => origin.close());
    const table = uniqueTable('otlp');
    const service = await serve(
      {
        valkey: { url: valkeyUrl() },
        tables: { [table]: { source: { kind: 'http', url: origin.template } } },
      },
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: `${collector.url}/collector/`,
        OTEL_BSP_SCHEDULE_DELAY: '50',
        OTEL_SERVICE_NAME: 'shop-cache',
      },
    );
    expect((await fetch(`${service.url}/v1/tables/${table}/items/7`)).status).toBe(200);
    await vi.waitFor(
      () => {
        const body = Buffer.concat(collector.exports.map((e) => e.body)).toString('latin1');
        // The load ends first: its span may leave in an earlier batch than the read's.
        expect(body).toContain('echostore.load');
        expect(body).toContain('echostore.get');
      },
      { timeout: 5_000, interval: 50 },
    );
    const [first] = collector.exports;
    expect(first?.path).toBe('/collector/v1/traces');
    expect(first?.contentType).toBe('application/x-protobuf');
    // Protobuf strings are their UTF-8 bytes: the names, the table and the service name show.
    const body = Buffer.concat(collector.exports.map((e) => e.body)).toString('latin1');
    for (const text of ['echostore.get', 'echostore.load', table, 'shop-cache']) {
      expect(body).toContain(text);
    }
    // The id is hashed by default: "7" as the first 16 hex digits of its SHA-256.
    expect(body).toContain('7902699be42c8a8e');
  });
});

describe('the trace export is resolved from the file and the OTEL_* variables', () => {
  const resolve = (tracing: object | undefined, vars: Record<string, string> = {}) =>
    resolveTraceExport(tracing as never, (name) => vars[name] || undefined, 'config.yaml');

  it('is off without an exporter or an endpoint, and when asked off', () => {
    expect(resolve(undefined)).toBeUndefined();
    expect(resolve({ ids: 'plain' })).toBeUndefined();
    expect(
      resolve({ endpoint: 'http://c:4318' }, { OTEL_TRACES_EXPORTER: 'none' }),
    ).toBeUndefined();
    expect(
      resolve({ exporter: 'none' }, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }),
    ).toBeUndefined();
    expect(resolve({ exporter: 'otlp' }, { OTEL_SDK_DISABLED: 'TRUE' })).toBeUndefined();
  });

  it('appends v1/traces to a base endpoint, and takes the traces endpoint as is', () => {
    expect(resolve({ exporter: 'otlp' })?.url).toBe('http://localhost:4318/v1/traces');
    expect(resolve({ endpoint: 'https://c:4318' })?.url).toBe('https://c:4318/v1/traces');
    expect(resolve(undefined, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c/otlp/' })?.url).toBe(
      'http://c/otlp/v1/traces',
    );
    const both = {
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://base:4318',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://traces:9/custom',
    };
    expect(resolve({ endpoint: 'http://file:4318' }, both)?.url).toBe('http://traces:9/custom');
    expect(
      resolve({ endpoint: 'http://file:4318' }, { OTEL_TRACES_EXPORTER: 'otlp,none' })?.url,
    ).toBe('http://file:4318/v1/traces');
  });

  it('takes the protocol from the traces variable, the general one, the file, else protobuf', () => {
    const on = { exporter: 'otlp' };
    expect(resolve(on)?.protocol).toBe('http/protobuf');
    expect(resolve({ ...on, protocol: 'http/json' })?.protocol).toBe('http/json');
    expect(
      resolve({ ...on, protocol: 'http/json' }, { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' })
        ?.protocol,
    ).toBe('http/protobuf');
    expect(
      resolve(on, {
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      })?.protocol,
    ).toBe('http/json');
  });

  it('refuses grpc, an unknown exporter and a bad endpoint with ECC_BAD_CONFIG naming the field', () => {
    const cases: Array<[object | undefined, Record<string, string>, string]> = [
      [{ exporter: 'otlp' }, { OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }, 'tracing.protocol'],
      [undefined, { OTEL_TRACES_EXPORTER: 'otlp,zipkin' }, 'tracing.exporter'],
      [{ endpoint: 'http://user:pw@c:4318' }, {}, 'tracing.endpoint'],
      [undefined, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'grpc://c:4317' }, 'tracing.endpoint'],
    ];
    for (const [tracing, vars, field] of cases) {
      let error: unknown;
      try {
        resolve(tracing, vars);
      } catch (err) {
        error = err;
      }
      expect(error, field).toMatchObject({ code: 'ECC_BAD_CONFIG', field });
      expect(String((error as Error).message)).not.toContain('pw@');
    }
  });
});

describe('the SDK is loaded only by the trace export', () => {
  it('no module of src/ but src/trace-export.ts imports the SDK, and that one only dynamically', () => {
    const sdk = /@opentelemetry\/(sdk-|exporter-|context-async-hooks|core|resources)/;
    const files = (readdirSync('src', { recursive: true }) as string[]).filter((f) =>
      f.endsWith('.ts'),
    );
    for (const file of files) {
      const text = readFileSync(join('src', file), 'utf8');
      const staticImports = [...text.matchAll(/^\s*(?:import|export)[^(;]*?from\s+'([^']+)'/gm)]
        .map((m) => m[1] as string)
        .filter((m) => sdk.test(m));
      expect(staticImports, file).toEqual([]);
      if (file !== 'trace-export.ts') expect(sdk.test(text), file).toBe(false);
    }
  });
});
