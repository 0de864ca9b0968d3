import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { createStore, httpSource, type StoreOptions } from '../src/index.js';
import { Table } from '../src/store/table.js';
import { deferred, uniqueTable, valkeyUrl } from './helpers/store.js';

/**
 * Spans through @opentelemetry/api, recorded by the SDK's in-memory exporter;
 * the context manager and the W3C propagator are what an application's SDK
 * would register.
 */
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = provider.getTracer('echostore-test');
const contextManager = new AsyncLocalStorageContextManager();

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(async () => {
  context.disable();
  propagation.disable();
  await provider.shutdown();
});

const spans = (name: string, table?: string) =>
  exporter
    .getFinishedSpans()
    .filter(
      (s) => s.name === name && (table === undefined || s.attributes['echostore.table'] === table),
    );
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const ms = (s: ReadableSpan) => s.duration[0] * 1_000 + s.duration[1] / 1e6;

async function open(tables: StoreOptions['tables'], ids?: 'plain') {
  const store = await createStore({
    valkey: valkeyUrl(),
    tables,
    tracing: { tracer, ...(ids === undefined ? {} : { ids }) },
  });
  onTestFinished(() => store.close());
  return store;
}

/** An origin that records the headers of each request and answers `{ id }` after `latencyMs`. */
async function recordingOrigin(latencyMs: number) {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((request, response) => {
    seen.push(request.headers);
    setTimeout(() => {
      response.setHeader('content-type', 'application/json');
      response.end(JSON.stringify({ id: request.url?.split('/').pop() }));
    }, latencyMs);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  return { seen, template: `http://127.0.0.1:${port}/items/{id}` };
}

describe('traces', () => {
  it('a cold read through an HTTP origin: a get span, the load as its child, traceparent at the origin', async () => {
    const origin = await recordingOrigin(20);
    const table = uniqueTable('trace');
    const source = httpSource({ url: origin.template });
    onTestFinished(() => source.close());
    const store = await open({ [table]: { load: source.load } });
    const client = tracer.startSpan('client request');
    const r = await context.with(trace.setSpan(context.active(), client), () =>
      store.table(table).get('42'),
    );
    client.end();
    expect(r.found && r.layer).toBe('origin');

    const [get] = spans('echostore.get', table);
    const [load] = spans('echostore.load', table);
    expect(get).toBeDefined();
    expect(load).toBeDefined();
    expect(parentOf(get as ReadableSpan)).toBe(client.spanContext().spanId);
    expect(parentOf(load as ReadableSpan)).toBe(get?.spanContext().spanId);
    expect(get?.spanContext().traceId).toBe(client.spanContext().traceId);
    expect(get?.attributes).toMatchObject({
      'echostore.table': table,
      'echostore.layer': 'origin',
      'echostore.hit': false,
      'echostore.found': true,
      'echostore.stale': false,
      'echostore.coalesced': false,
    });
    expect(get?.attributes['echostore.admission_wait_ms']).toBeGreaterThanOrEqual(0);
    // The id is hashed by default: 16 hex digits, never the id itself.
    expect(get?.attributes['echostore.id']).toMatch(/^[0-9a-f]{16}$/);
    expect(load?.attributes['echostore.id']).toBe(get?.attributes['echostore.id']);
    // The origin received the load span's context (W3C traceparent).
    expect(origin.seen).toHaveLength(1);
    expect(origin.seen[0]?.traceparent).toBe(
      `00-${client.spanContext().traceId}-${load?.spanContext().spanId}-01`,
    );
    expect(ms(load as ReadableSpan)).toBeGreaterThanOrEqual(15);
    expect(ms(get as ReadableSpan)).toBeGreaterThanOrEqual(ms(load as ReadableSpan));
    // The trace of one cold read, for the record (docs/operations.md shows one).
    for (const s of [client, get, load] as ReadableSpan[]) {
      const shown = exporter
        .getFinishedSpans()
        .find((f) => f.spanContext().spanId === s.spanContext().spanId);
      if (shown !== undefined)
        process.stdout.write(`trace: ${shown.name} ${ms(shown).toFixed(2)} ms\n`);
    }
  });

  it('an L1 hit is a get span with hit and layer l1, and no load', async () => {
    const table = uniqueTable('trace-hit');
    const store = await open({ [table]: { load: (id) => ({ id }) } }, 'plain');
    await store.table(table).get('7');
    await store.table(table).get('7');
    const gets = spans('echostore.get', table);
    expect(gets.map((s) => s.attributes['echostore.layer'])).toEqual(['origin', 'l1']);
    expect(gets[1]?.attributes['echostore.hit']).toBe(true);
    expect(gets[1]?.attributes['echostore.id']).toBe('7'); // ids: 'plain'
    expect(spans('echostore.load', table)).toHaveLength(1);
  });

  it('coalesced callers get a span each; one load, under the first', async () => {
    const table = uniqueTable('trace-herd');
    const gate = deferred<void>();
    const store = await open({
      [table]: {
        load: async (id) => {
          await gate.promise;
          return { id };
        },
      },
    });
    const reads = Array.from({ length: 5 }, () => store.table(table).get('h'));
    setTimeout(() => gate.resolve(), 20);
    await Promise.all(reads);
    const gets = spans('echostore.get', table);
    expect(gets).toHaveLength(5);
    expect(gets.filter((s) => s.attributes['echostore.coalesced'] === true)).toHaveLength(4);
    const loads = spans('echostore.load', table);
    expect(loads).toHaveLength(1);
    expect(gets.map((s) => s.spanContext().spanId)).toContain(parentOf(loads[0] as ReadableSpan));
  });

  it("records the lease wait on a read that waited for another instance's fill", async () => {
    const table = uniqueTable('trace-lease');
    const started = deferred<void>();
    const gate = deferred<void>();
    const slow = {
      load: async (id: string) => {
        started.resolve();
        await gate.promise;
        return { id };
      },
    };
    const a = await open({ [table]: slow });
    const b = await open({ [table]: slow });
    const first = a.table(table).get('l');
    await started.promise;
    const second = b.table(table).get('l');
    setTimeout(() => gate.resolve(), 100);
    await Promise.all([first, second]);
    const waited = spans('echostore.get', table).find(
      (s) => s.attributes['echostore.layer'] === 'l2',
    );
    expect(waited?.attributes['echostore.lease_wait_ms']).toBeGreaterThan(0);
    expect(spans('echostore.load', table)).toHaveLength(1);
  });

  it('marks a failed load and its read with the error code', async () => {
    const table = uniqueTable('trace-fail');
    const store = await open({
      [table]: {
        load: () => {
          throw new Error('source down');
        },
      },
    });
    await expect(store.table(table).get('x')).rejects.toMatchObject({ code: 'ECC_LOAD_FAILED' });
    const [get] = spans('echostore.get', table);
    expect(get?.status.code).toBe(2); // SpanStatusCode.ERROR
    expect(get?.attributes['echostore.error']).toBe('ECC_LOAD_FAILED');
    expect(spans('echostore.load', table)[0]?.status.code).toBe(2);
  });

  it("takes the caller's traceparent over HTTP", async () => {
    const table = uniqueTable('trace-http');
    const store = await open({ [table]: { load: (id) => ({ id }) } });
    const app = buildServer({ store, logger: pino({ level: 'silent' }) });
    onTestFinished(() => app.close());
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parentId = '00f067aa0ba902b7';
    const r = await app.inject({
      url: `/v1/tables/${table}/items/1`,
      headers: { traceparent: `00-${traceId}-${parentId}-01` },
    });
    expect(r.statusCode).toBe(200);
    const [get] = spans('echostore.get', table);
    expect(get?.spanContext().traceId).toBe(traceId);
    expect(parentOf(get as ReadableSpan)).toBe(parentId);
    // A batch read: one get span per id, each a child of the request's traceparent.
    const batch = await app.inject({
      url: `/v1/tables/${table}/items?ids=2,3`,
      headers: { traceparent: `00-${traceId}-${parentId}-01` },
    });
    expect(batch.statusCode).toBe(200);
    const gets = spans('echostore.get', table).slice(1);
    expect(gets).toHaveLength(2);
    for (const g of gets) expect(parentOf(g)).toBe(parentId);
  });

  it('off, a table keeps its plain get and makes no span', async () => {
    const table = uniqueTable('trace-off');
    const store = await createStore({
      valkey: valkeyUrl(),
      tables: { [table]: { load: (id) => ({ id }) } },
    });
    onTestFinished(() => store.close());
    expect(store.traced).toBe(false);
    // No wrapper: the read path is the same method as without any tracing code.
    expect(store.table(table).get).toBe(Table.prototype.get);
    await store.table(table).get('1');
    expect(spans('echostore.get', table)).toHaveLength(0);
  });
});
