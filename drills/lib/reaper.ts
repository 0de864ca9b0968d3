/**
 * Child processes a drill must never leave behind: SIGKILLed when the drill
 * exits by any path (normal exit, uncaught error, SIGINT/SIGTERM).
 */
import type { ChildProcess } from 'node:child_process';

/** Tracks children and kills those still running when the process exits. */
export class Reaper {
  readonly #children = new Set<ChildProcess>();

  constructor() {
    process.on('exit', () => this.killAll());
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      process.once(signal, () => {
        this.killAll();
        process.exit(130);
      });
    }
  }

  /** Kills `child` on exit unless it has exited by then. */
  track(child: ChildProcess): void {
    this.#children.add(child);
    child.once('exit', () => this.#children.delete(child));
  }

  /** SIGKILLs every tracked child still running (a stopped one too). Synchronous. */
  killAll(): void {
    for (const child of this.#children) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    this.#children.clear();
  }
}

/** The drills' reaper: every child a drill starts dies with it. */
export const reaper = new Reaper();

/** Hands `child` to {@link reaper} (the `track` option of the harness's spawners). */
export const track = (child: ChildProcess): void => reaper.track(child);
