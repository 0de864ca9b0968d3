/**
 * One instance of the regimes drill, run by `drills/regimes.ts` with
 * `child_process.fork`. Over IPC it receives a {@link Setup}, gets ready
 * (`inproc`: creates a store on the origin and loads `fetch`; `http`: opens
 * `readers` keep-alive connections to its service), answers `ready`, waits for `go`, fires
 * `readers` concurrent cold reads of one id at the appointed moment, reports
 * a {@link BurstResult}, closes what it opened and exits.
 */
import { httpSource } from '../src/sources/http.js';
import { createStore, type Store } from '../src/store/store.js';
import { fromParent, sendToParent } from './lib/workers.js';

/** What the worker is told to do: the first message from the parent. */
export interface Setup {
  kind: 'setup';
  /** `inproc`: a store in this process; `http`: GETs against `serviceUrl`. */
  via: 'inproc' | 'http';
  coalescing: 'none' | 'process' | 'fleet';
  table: string;
  id: string;
  readers: number;
  /** The table policy besides `coalescing` (the same for every regime). */
  policy: RegimePolicy;
  valkey: string;
  /** The origin's item URL template (`inproc`). */
  template?: string;
  /** Base URL of this worker's service instance (`http`). */
  serviceUrl?: string;
}

/** Parent → worker. `atEpochMs` is the wall-clock moment every worker fires, so all instances start together. */
export type ToWorker = Setup | { kind: 'go'; atEpochMs: number };

/** The burst as one instance saw it. */
export interface BurstResult {
  kind: 'result';
  /** Per successful reader: ms from the burst's start to its answer. */
  latenciesMs: number[];
  failures: number;
  /** Failed readers by error code (`ECC_*`, `HTTP_<status>`, or the error's name). */
  errorCodes: Record<string, number>;
  /** The distinct answers (JSON text) this instance's readers received. */
  answers: string[];
}

/** Worker → parent. */
export type FromWorker = { kind: 'ready' } | BurstResult | { kind: 'error'; message: string };

/** The policy fields the drill sets on every regime's table. */
export interface RegimePolicy {
  loadTimeoutMs: number;
  leaseMs: number;
  waitTimeoutMs: number;
  maxConcurrentLoads: number;
}

type Read = () => Promise<string>;

async function prepare(setup: Setup): Promise<{ read: Read; close: () => Promise<void> }> {
  if (setup.via === 'inproc') {
    const source = httpSource({ url: setup.template as string, timeoutMs: 10_000 });
    const store: Store = await createStore({
      valkey: setup.valkey,
      tables: {
        [setup.table]: {
          load: source.load,
          coalescing: setup.coalescing,
          ...setup.policy,
        },
      },
    });
    const t = store.table(setup.table);
    // Node loads fetch (undici) on first use: do it now, with a GET the origin answers 404 and does not count.
    await (await fetch(new URL('/warm-up', setup.template).href)).text();
    return {
      read: async () => {
        const r = await t.get(setup.id);
        return r.found ? r.json : '404';
      },
      close: async () => {
        await store.close();
        source.close();
      },
    };
  }
  const base = setup.serviceUrl as string;
  const url = `${base}/v1/tables/${setup.table}/items/${encodeURIComponent(setup.id)}`;
  // Open the burst's connections now, so the burst measures the store, not TCP handshakes.
  await Promise.all(
    Array.from({ length: setup.readers }, async () => (await fetch(`${base}/healthz`)).text()),
  );
  return {
    read: async () => {
      const res = await fetch(url);
      const body = await res.text();
      if (res.status === 200) return body;
      let code = `HTTP_${res.status}`;
      try {
        code = (JSON.parse(body) as { error?: { code?: string } }).error?.code ?? code;
      } catch {
        // not a JSON error body: keep the status
      }
      throw Object.assign(new Error(`GET ${url} answered ${res.status}`), { code });
    },
    close: async () => {},
  };
}

async function burst(read: Read, readers: number): Promise<BurstResult> {
  const started = performance.now();
  const settled = await Promise.allSettled(
    Array.from({ length: readers }, () =>
      read().then((body) => ({ body, ms: performance.now() - started })),
    ),
  );
  const latenciesMs: number[] = [];
  const answers = new Set<string>();
  const errorCodes: Record<string, number> = {};
  let failures = 0;
  for (const s of settled) {
    if (s.status === 'fulfilled') {
      latenciesMs.push(s.value.ms);
      answers.add(s.value.body);
    } else {
      failures++;
      const err = s.reason as { code?: unknown; name?: unknown } | undefined;
      const code = typeof err?.code === 'string' ? err.code : String(err?.name ?? 'Error');
      errorCodes[code] = (errorCodes[code] ?? 0) + 1;
    }
  }
  return { kind: 'result', latenciesMs, failures, errorCodes, answers: [...answers] };
}

/** The first message of `kind` from the parent. */
const waitFor = <K extends ToWorker['kind']>(kind: K) => fromParent<ToWorker, K>(kind);

/** Sends one of this worker's messages; resolves once it is handed to the IPC channel. */
const send = (message: FromWorker): Promise<void> => sendToParent(message);

async function main(): Promise<void> {
  if (process.send === undefined) throw new Error('run me with child_process.fork (IPC)');
  // The parent went away: nothing left to report to.
  process.once('disconnect', () => process.exit(3));
  const setup = await waitFor('setup');
  const go = waitFor('go');
  const { read, close } = await prepare(setup);
  try {
    await send({ kind: 'ready' });
    const { atEpochMs } = await go;
    await new Promise((r) => setTimeout(r, Math.max(0, atEpochMs - Date.now())));
    await send(await burst(read, setup.readers));
  } finally {
    await close();
  }
}

main().then(
  () => process.exit(0),
  async (err: unknown) => {
    await send({ kind: 'error', message: (err as Error)?.stack ?? String(err) });
    process.exit(2);
  },
);
