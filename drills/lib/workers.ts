/**
 * Forked drill workers (real OS processes) that talk over IPC: the parent sends one `setup`
 * message; a worker answers `{ kind: 'ready' }`, waits for `go`, then sends
 * `{ kind: 'result', … }`, or `{ kind: 'error', message }`.
 */
import { fork, spawn } from 'node:child_process';
import { on } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { running } from '../../harness/spawn.js';
import { within as inTime } from '../../src/valkey/probe.js';
import { track } from './reaper.js';

/** Parent → workers after `ready`: fire at `atEpochMs` (one wall-clock moment for all; default at once), with a tool's own fields. */
export interface Go {
  kind: 'go';
  atEpochMs?: number;
}

/** The built file of the worker `name` (`drills/<name>.ts`). */
export const workerFile = (name: string): string =>
  fileURLToPath(new URL(`../${name}.js`, import.meta.url));

/** A `go` for {@link runWorkers}: every worker fires `leadMs` from now; their results within `resultWithinMs`. */
export const together = (leadMs: number, resultWithinMs: number) => async () => ({
  message: { kind: 'go', atEpochMs: Date.now() + leadMs } satisfies Go,
  resultWithinMs,
});

/** What `p` resolves with, or a rejection naming `what` after `ms` milliseconds. */
async function within<T extends object>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return (await inTime(p, ms)) ?? Promise.reject(new Error(`${what}: no answer within ${ms} ms`));
}

/**
 * Forks one worker of `file` per setup and waits (20 s) until all are ready; then `go` says
 * which message starts them all and how long their results may take. Resolves with the results
 * (each message without its `kind`) once every worker has exited (10 s); a worker that fails or
 * exits first rejects the call, and no worker outlives it, nor the drill.
 */
export async function runWorkers<R>(
  file: string,
  setups: object[],
  go: () => Promise<{ message: object; resultWithinMs: number }>,
): Promise<R[]> {
  const workers = setups.map((setup) => {
    const child = fork(file, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    track(child);
    const exited = new Promise<void>((ok) => child.once('exit', () => ok()));
    const message = async (kind: string): Promise<Record<string, unknown>> => {
      for await (const [m] of on(child, 'message', { close: ['exit'] })) {
        if (m.kind === kind) return m;
        if (m.kind === 'error') throw new Error(`worker ${child.pid}: ${m.message}`);
      }
      throw new Error(`worker ${child.pid} exited (code ${child.exitCode}) before ${kind}`);
    };
    const [ready, result] = [message('ready'), message('result')];
    // Awaited later (or not at all when another worker fails first): never unhandled.
    for (const p of [ready, result]) p.catch(() => {});
    child.send(setup);
    return { child, ready, result, exited };
  });
  try {
    await within(Promise.all(workers.map((w) => w.ready)), 20_000, 'workers ready');
    const { message, resultWithinMs } = await go();
    for (const w of workers) w.child.send(message);
    const all = Promise.all(workers.map((w) => w.result));
    const results = await within(all, resultWithinMs, 'workers result');
    await within(Promise.all(workers.map((w) => w.exited)), 10_000, 'workers exit');
    return results.map(({ kind: _, ...r }) => r as R);
  } finally {
    for (const { child } of workers) if (running(child)) child.kill('SIGKILL');
  }
}

/**
 * Runs `node <argv>` in a child process that dies with the drill; resolves with its stdout (also
 * written to ours as it comes with `echo`), rejects when it exits otherwise than 0.
 */
export function runNode(argv: string[], echo = false): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, { stdio: ['ignore', 'pipe', 'inherit'] });
    track(child);
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk;
      if (echo) process.stdout.write(chunk);
    });
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`node ${argv.join(' ')} exited ${code}`)),
    );
  });
}

/** Worker side: resolves once `message` is handed to the IPC channel, so an exit right after cannot lose it. */
const toParent = (message: object) =>
  new Promise<void>((resolve) => {
    if (process.send === undefined || !process.connected) resolve();
    else process.send(message, undefined, {}, () => resolve());
  });

/** Worker side: the first message of `kind` from the parent. */
async function fromParent<M>(kind: string): Promise<M> {
  for await (const [m] of on(process, 'message')) if (m.kind === kind) return m;
  throw new Error(`no ${kind} from the parent`);
}

/**
 * Worker side: the whole life of a worker. `prepare` gets the parent's setup and returns `run`;
 * the worker then answers `ready`, waits for `go` and its `atEpochMs`, sends what `run(go)`
 * returns as its result, calls `close` and exits 0. Any error is sent to the parent (exit 2); a
 * lost parent exits 3.
 */
export function runWorker<S extends { kind: 'setup' }, G extends Go = Go>(
  prepare: (setup: S) => Promise<{ run(go: G): Promise<object>; close(): Promise<void> }>,
): void {
  const main = async () => {
    if (process.send === undefined) throw new Error('run me with child_process.fork (IPC)');
    process.once('disconnect', () => process.exit(3));
    const setup = await fromParent<S>('setup');
    const go = fromParent<G>('go');
    const { run, close } = await prepare(setup);
    try {
      await toParent({ kind: 'ready' });
      const g = await go;
      await sleep(Math.max(0, (g.atEpochMs ?? 0) - Date.now()));
      await toParent({ kind: 'result', ...(await run(g)) });
    } finally {
      await close();
    }
  };
  main().then(
    () => process.exit(0),
    async (err: unknown) => {
      await toParent({ kind: 'error', message: (err as Error)?.stack ?? String(err) });
      process.exit(2);
    },
  );
}
