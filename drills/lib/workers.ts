/**
 * Forked drill workers (real OS processes) that talk over IPC: the parent
 * sends one setup message; a worker answers `{ kind: 'ready' }`, later
 * `{ kind: 'result', … }`, or `{ kind: 'error', message }`.
 */
import { type ChildProcess, fork } from 'node:child_process';
import type { Reaper } from './reaper.js';

/** The messages a worker may send. */
export type WorkerMessage =
  | { kind: 'ready' }
  | { kind: 'error'; message: string }
  | { kind: 'result' };

/** A running worker and the promises of its protocol. */
export interface Worker<R> {
  child: ChildProcess;
  /** Resolves on `ready`; rejects if the worker fails or exits first. */
  ready: Promise<void>;
  /** Resolves with the `result` message; rejects if the worker fails or exits first. */
  result: Promise<R>;
  exited: Promise<void>;
}

/**
 * Forks `file`, sends it `setup`, and follows its messages. A `reaper` makes
 * sure the child never outlives the drill.
 */
export function spawnWorker<
  M extends { kind: string },
  R extends M = Extract<M, { kind: 'result' }>,
>(file: string, setup: unknown, reaper?: Reaper): Worker<R> {
  const child = fork(file, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  reaper?.track(child);
  const exited = new Promise<void>((ok) => child.once('exit', () => ok()));
  const gone = (what: string) =>
    exited.then(() => {
      throw new Error(`worker ${child.pid} exited (code ${child.exitCode}) before ${what}`);
    });
  const message = (kind: string) =>
    new Promise<M>((ok, fail) => {
      child.on('message', (m: M) => {
        if (m.kind === kind) ok(m);
        else if (m.kind === 'error')
          fail(new Error(`worker ${child.pid}: ${(m as { message?: string }).message}`));
      });
      child.once('error', fail);
    });
  const ready = Promise.race([message('ready'), gone('ready')]).then(() => {});
  const result = Promise.race([message('result'), gone('its result')]) as Promise<R>;
  // Awaited later (or not at all when another worker fails first): never unhandled.
  ready.catch(() => {});
  result.catch(() => {});
  child.send(setup as object);
  return { child, ready, result, exited };
}

/** `p`, or a rejection naming `what` after `ms` milliseconds. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, fail) => {
    timer = setTimeout(() => fail(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Worker side: resolves once `message` is handed to the IPC channel, so an exit right after cannot lose it. */
export function sendToParent(message: object): Promise<void> {
  return new Promise((resolve) => {
    if (process.send === undefined || !process.connected) resolve();
    else process.send(message, undefined, {}, () => resolve());
  });
}

/** Worker side: the first message of `kind` from the parent (`M` is the worker's message union). */
export function fromParent<M extends { kind: string }, K extends M['kind']>(
  kind: K,
): Promise<Extract<M, { kind: K }>> {
  return new Promise((resolve) => {
    const onMessage = (m: M) => {
      if (m.kind !== kind) return;
      process.off('message', onMessage);
      resolve(m as Extract<M, { kind: K }>);
    };
    process.on('message', onMessage);
  });
}
