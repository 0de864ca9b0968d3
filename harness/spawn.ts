/** Child processes of the harness: found on the PATH, spawned until they answer, stopped by pid. */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** The first of `bins` that is on the PATH, or undefined. */
export function firstOnPath(bins: string[]): string | undefined {
  return bins.find((bin) => {
    try {
      execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'pipe' });
      return true;
    } catch {
      return false;
    }
  });
}

/** True while `child` runs: it has neither exited nor been killed. */
export const running = (child: ChildProcess): boolean =>
  child.exitCode === null && child.signalCode === null;

/** True when this process runs as root (database servers then run as their own user). */
export const asRoot = (): boolean => process.getuid?.() === 0;

/**
 * A fresh `prefix…` folder under the system's temp dir; as root, owned by the user `owner`
 * (a server that refuses root writes there).
 */
export function privateDir(prefix: string, owner?: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  if (owner !== undefined && asRoot()) {
    const id = (flag: string) => Number(execFileSync('id', [flag, owner], { encoding: 'utf8' }));
    chownSync(dir, id('-u'), id('-g'));
  }
  return dir;
}

/**
 * Resolves once `check` returns true, asking every `intervalMs`; any other answer (or what it
 * throws) is the state a timeout reports. With `child`, its exit fails the wait at once.
 *
 * @throws {Error} `fail(last state)` once `timeoutMs` has passed or `child` has exited.
 */
export async function settle(
  timeoutMs: number,
  intervalMs: number,
  check: () => Promise<true | string>,
  fail: (last: string) => string,
  child?: ChildProcess,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child !== undefined && !running(child)) {
      throw new Error(fail(`exited (${child.exitCode ?? child.signalCode})`));
    }
    let last: true | string;
    try {
      last = await check();
    } catch (err) {
      last = (err as Error).message;
    }
    if (last === true) return;
    if (Date.now() > deadline) throw new Error(fail(last));
    await sleep(intervalMs);
  }
}

/**
 * Resolves once the process `child` serves: `ready` answered true (see {@link settle}, every
 * `intervalMs`, default 50).
 *
 * @throws {Error} `<what> did not start: …` when `child` exits first or is not ready within
 *   `timeoutMs`; it is SIGKILLed then.
 */
export async function waitReady(
  child: ChildProcess,
  what: string,
  timeoutMs: number,
  ready: () => Promise<true | string>,
  intervalMs = 50,
): Promise<void> {
  try {
    await settle(timeoutMs, intervalMs, ready, (last) => `${what} did not start: ${last}`, child);
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
}

/**
 * Stops `child` and resolves once it has exited: SIGKILL, or with `graceMs` SIGTERM and a
 * SIGKILL after `graceMs`. Resolves at once when it has already exited.
 */
export async function stopChild(child: ChildProcess, graceMs?: number): Promise<void> {
  if (!running(child)) return;
  const exited = new Promise((ok) => child.once('exit', ok));
  child.kill(graceMs === undefined ? 'SIGKILL' : 'SIGTERM');
  const timer =
    graceMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}
