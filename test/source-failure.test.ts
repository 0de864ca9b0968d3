import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LoadFailedError, SourceError } from '../src/errors.js';
import { httpSource } from '../src/sources/index.js';
import { errorOf, openStore } from './helpers/probe.js';
import { uniqueTable } from './helpers/store.js';

let origin: Server;
let base: string;
beforeAll(async () => {
  origin = createServer((_, res) => {
    res.statusCode = 500;
    res.end('origin secret: db at 10.0.0.5 is down');
  });
  await new Promise<void>((done) => origin.listen(0, '127.0.0.1', done));
  base = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((done) => origin.close(() => done())));

describe('a failing http source', () => {
  it('rejects a load with SourceError ECC_SOURCE_FAILED, a 502 of the catalogue', async () => {
    const source = httpSource({ url: `${base}/items/{id}` });
    const err = await errorOf(
      Promise.resolve(source.load('1', { signal: new AbortController().signal })),
    );
    expect(err).toBeInstanceOf(SourceError);
    expect(err.code).toBe('ECC_SOURCE_FAILED');
    expect(err.statusCode).toBe(502);
    expect((err as SourceError).status).toBe(500);
  });

  it('reaches the store caller as ECC_LOAD_FAILED naming the table, the SourceError as cause', async () => {
    const table = uniqueTable('http-fail');
    const source = httpSource({ url: `${base}/items/{id}` });
    const store = await openStore({ [table]: { load: source.load } });
    const err = await errorOf(store.table(table).get('1'));
    expect(err).toBeInstanceOf(LoadFailedError);
    expect(err.code).toBe('ECC_LOAD_FAILED');
    expect(err.table).toBe(table);
    expect(err.cause).toBeInstanceOf(SourceError);
    expect((err.cause as SourceError).status).toBe(500);
  });
});
