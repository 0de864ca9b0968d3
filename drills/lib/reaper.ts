/**
 * Child processes a drill must never leave behind: SIGKILLed when the drill
 * exits by any path (normal exit, uncaught error, SIGINT/SIGTERM).
 */
import type { ChildProcess } from 'node:child_process';
import { running, watchSpawns } from '../../harness/spawn.js';

const children = new Set<ChildProcess>();

/** SIGKILLs every tracked child still running (a stopped one too). Synchronous. */
function killAll(): void {
  for (const child of children) if (running(child)) child.kill('SIGKILL');
  children.clear();
}
process.on('exit', killAll);
process.once('SIGINT', () => process.exit(130));
process.once('SIGTERM', () => process.exit(143));

/** Kills `child` when the drill exits, unless it has exited by then (the harness spawners' `track`). */
export function track(child: ChildProcess): void {
  children.add(child);
  child.once('exit', () => children.delete(child));
}

watchSpawns(track);
