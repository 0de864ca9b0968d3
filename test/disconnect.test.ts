import { pino } from 'pino';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { buildServer } from '../src/http/server.js';
import { openStore } from './helpers/probe.js';
import { deferred, delay, uniqueTable } from './helpers/store.js';

describe('client disconnects', () => {
  it('a client that disconnects does not cancel the load another client waits on', async () => {
    const table = uniqueTable('disconnect');
    const gate = deferred<void>();
    const started = deferred<void>();
    let aborted = false;
    let loads = 0;
    const store = await openStore({
      [table]: {
        load: async (id, { signal }) => {
          loads++;
          signal.addEventListener('abort', () => {
            aborted = true;
          });
          started.resolve();
          await gate.promise;
          return { id };
        },
      },
    });
    const app = buildServer({ store, logger: pino({ level: 'silent' }) });
    await app.listen({ host: '127.0.0.1', port: 0 });
    onTestFinished(() => app.close());
    // Runs first: the aborted fetch leaves its socket to the client's pool, which
    // would hold app.close() for the pool's keep-alive timeout (4 s).
    onTestFinished(() => app.server.closeAllConnections());
    const { port } = app.server.address() as { port: number };
    const url = `http://127.0.0.1:${port}/v1/tables/${table}/items/k`;

    const leaving = new AbortController();
    const first = fetch(url, { signal: leaving.signal }).catch((err: Error) => err.name);
    await started.promise;
    const second = fetch(url);
    await vi.waitFor(() => expect(store.table(table).stats().coalesced).toBe(1));
    leaving.abort();
    expect(await first).toBe('AbortError');
    // Fixed sleep, to show something has NOT happened: the server saw the first
    // client go, and still did not cancel the load the second one waits on.
    await delay(50);
    gate.resolve();
    const answer = await second;
    expect(answer.status).toBe(200);
    expect(await answer.json()).toEqual({ id: 'k' });
    expect(aborted).toBe(false);
    expect(loads).toBe(1);
    expect((await store.table(table).get('k')).layer).toBe('l1');
  });
});
