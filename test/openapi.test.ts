import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { createStore, type Store } from '../src/index.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

interface Operation {
  responses: Record<
    string,
    { description: string; content?: Record<string, { schema: Record<string, unknown> }> }
  >;
}
type Doc = {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, object> };
};

/**
 * `/v1/tables/:table/items/:id` as OpenAPI writes it: `/v1/tables/{table}/items/{id}`; a
 * literal colon, escaped `::` in a fastify path (`items::batchGet`), stays one colon.
 */
const openApiPath = (url: string) =>
  url
    .split('::')
    .map((part) => part.replace(/:([A-Za-z0-9_]+)/g, '{$1}'))
    .join(':');
/** A route's URL with its params filled in, as a client sends it. */
const concrete = (url: string, table: string) =>
  url
    .split('::')
    .map((part) => part.replace(':table', table).replace(':id', '1'))
    .join(':');

describe('the OpenAPI document', () => {
  const table = uniqueTable('openapi');
  let store: Store;
  let app: FastifyInstance;
  let doc: Doc;
  const routes: RouteOptions[] = [];

  beforeAll(async () => {
    store = await createStore({
      valkey: valkeyUrl(),
      tables: { [table]: { load: (id) => (id === 'missing' ? undefined : { id }) } },
    });
    app = buildServer({ store, logger: pino({ level: 'silent' }) });
    // The routes are added when the app loads, so this hook sees every one.
    app.addHook('onRoute', (route) => {
      routes.push(route);
    });
    await app.ready();
    const r = await app.inject('/openapi.json');
    expect(r.statusCode).toBe(200);
    expect(r.headers['content-type']).toBe('application/json; charset=utf-8');
    doc = r.json();
  });
  afterAll(async () => {
    await app.close();
    await store.close();
  });

  it('is a valid OpenAPI 3.1 document', async () => {
    expect(doc.openapi).toBe('3.1.0');
    const result = await new Validator().validate(structuredClone(doc));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
  });

  it('lists every route the server serves; the rest are 405 refusals', async () => {
    expect(routes.length).toBeGreaterThan(10);
    const missing: string[] = [];
    let refusals = 0;
    for (const route of routes) {
      const methods = [route.method].flat();
      const path = doc.paths[openApiPath(route.url)];
      if ((route.schema as { hide?: boolean } | undefined)?.hide === true) {
        refusals++;
        const method = methods.find((m) => m === 'POST' || m === 'PATCH') ?? 'PATCH';
        const url = concrete(route.url, table);
        const r = await app.inject({ method: method as 'PATCH', url });
        expect(r.statusCode, `${method} ${route.url}`).toBe(405);
        continue;
      }
      for (const method of methods) {
        if (path?.[method.toLowerCase()] === undefined) missing.push(`${method} ${route.url}`);
      }
    }
    expect(missing).toEqual([]);
    // the item path, the warm, purge and inspect paths and the two batch paths
    expect(refusals).toBe(6);
    for (const path of [
      '/v1/tables/{table}/items/{id}',
      '/v1/tables/{table}/purge',
      '/readyz',
      '/metrics',
      '/openapi.json',
    ]) {
      expect(Object.keys(doc.paths)).toContain(path);
    }
  });

  it('gives every operation a success response and the shared error schema for every error', () => {
    const ERROR_REF = '#/components/schemas/Error';
    let errors = 0;
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(operations)) {
        const statuses = Object.keys(op.responses);
        expect(
          statuses.some((s) => s.startsWith('2')),
          `${method} ${path}`,
        ).toBe(true);
        // Every route may fail with a bug; every 4xx/5xx is the one error body.
        expect(statuses, `${method} ${path}`).toContain('500');
        for (const status of statuses.filter((s) => Number(s) >= 400)) {
          if (path === '/readyz' && status === '503') continue; // readiness, not an error
          expect(
            op.responses[status]?.content?.['application/json']?.schema,
            `${method} ${path} ${status}`,
          ).toEqual({
            $ref: ERROR_REF,
          });
          errors++;
        }
      }
    }
    expect(errors).toBeGreaterThan(20);
    expect(doc.components.schemas.Error).toBeDefined();
  });

  it('describes the answers the server really sends', async () => {
    const ajv = new Ajv2020({ strict: false });
    ajv.addSchema({ $id: 'doc', components: doc.components }, 'doc');
    const check = async (
      request: { method?: 'GET' | 'PUT'; url: string; payload?: string },
      path: string,
      status: number,
    ) => {
      const r = await app.inject({
        ...request,
        headers: request.payload === undefined ? {} : { 'content-type': 'application/json' },
      });
      expect(r.statusCode, request.url).toBe(status);
      const op = doc.paths[path]?.[(request.method ?? 'GET').toLowerCase()];
      const schema = op?.responses[String(status)]?.content?.['application/json']?.schema;
      expect(schema, `${request.url} ${status}`).toBeDefined();
      const resolved = JSON.parse(
        JSON.stringify(schema).replaceAll('"#/components/', '"doc#/components/'),
      );
      const valid = ajv.validate(resolved, r.json());
      expect(ajv.errors ?? [], `${request.url} ${status}: ${r.body}`).toEqual([]);
      expect(valid).toBe(true);
    };
    const item = '/v1/tables/{table}/items/{id}';
    await check({ url: `/v1/tables/${table}/items/1` }, item, 200);
    await check({ url: `/v1/tables/${table}/items/missing` }, item, 404);
    await check({ url: `/v1/tables/nope/items/1` }, item, 404);
    await check({ url: `/v1/tables/${table}/items/%E2%80%AE` }, item, 400);
    await check(
      { method: 'PUT', url: `/v1/tables/${table}/items/2`, payload: '{"a":1}' },
      item,
      200,
    );
    await check({ method: 'PUT', url: `/v1/tables/${table}/items/2`, payload: '{' }, item, 400);
    await check({ url: '/v1/tables' }, '/v1/tables', 200);
    await check({ url: '/readyz' }, '/readyz', 200);
    await check({ url: '/healthz' }, '/healthz', 200);
  });
});
