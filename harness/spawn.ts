/** Child processes of the harness: found on the PATH, spawned until they answer, stopped by pid. */
import { type ChildProcess, execFileSync, spawnSync } from 'node:child_process';
import { chownSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

let onSpawn: (child: ChildProcess) => void = () => {};

/**
 * Has `watch` see every server and service process the harness spawns from now on (the drills
 * pass lib/reaper.ts's `track`, so none outlives a drill that exits or is signalled).
 */
export function watchSpawns(watch: (child: ChildProcess) => void): void {
  onSpawn = watch;
}

/** `child`, after the {@link watchSpawns} watcher has seen it. */
export function spawned(child: ChildProcess): ChildProcess {
  onSpawn(child);
  return child;
}

/** The first of `bins` that is on the PATH, or undefined. */
export const firstOnPath = (bins: string[]): string | undefined =>
  bins.find((bin) => spawnSync('sh', ['-c', `command -v ${bin}`]).status === 0);

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
 * throws) is the state a timeout reports. With `child` (a process starting), its exit fails the
 * wait at once, and a failed wait SIGKILLs it.
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
    if (Date.now() > deadline) {
      child?.kill('SIGKILL');
      throw new Error(fail(last));
    }
    await sleep(intervalMs);
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
