import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { freePort } from '../harness/free-port.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** True while a process with this PID exists (signal 0 only asks). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * `npm start` as an operator runs it, in its own process group. `--ignore-scripts` skips only
 * `prestart` (the build, which `pretest` has done): the `start` script is the README's.
 */
async function npmStart() {
  // The built-in demo table, its catalog in a directory of its own; Valkey on a closed port: the
  // service starts degraded, which is enough for signals.
  const dataDir = mkdtempSync(join(tmpdir(), 'echostore-npm-start-'));
  const npm = spawn('npm', ['start', '--ignore-scripts'], {
    cwd: ROOT,
    env: {
      ...process.env,
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      VALKEY_URL: `redis://127.0.0.1:${await freePort()}`,
      ECHOSTORE_DATA_DIR: dataDir,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  npm.stdout.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  npm.stderr.resume();
  const exited = new Promise<number | string>((ok) =>
    npm.once('exit', (code, signal) => ok(code ?? signal ?? -1)),
  );
  const logs = () =>
    out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { msg?: string; pid?: number; signal?: string });
  let nodePid: number | undefined;
  onTestFinished(() => {
    // Only the processes this test started, by PID.
    if (nodePid !== undefined && alive(nodePid)) process.kill(nodePid, 'SIGKILL');
    if (npm.exitCode === null && npm.signalCode === null) npm.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });
  await vi.waitFor(
    () => {
      const serving = logs().find((l) => l.msg === 'echostore is serving');
      expect(serving?.pid).toBeTypeOf('number');
      nodePid = serving?.pid;
    },
    { timeout: 30_000, interval: 50 },
  );
  return { npm, nodePid: nodePid as number, logs, exited };
}

describe('npm start and signals', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`${signal} to the PID of npm start stops node gracefully, and npm with it`, async () => {
      const { npm, nodePid, logs, exited } = await npmStart();
      expect(nodePid).not.toBe(npm.pid);
      npm.kill(signal);
      await vi.waitFor(
        () => {
          expect(logs().map((l) => l.msg)).toContain('stopping: no longer accepting connections');
          expect(alive(nodePid)).toBe(false);
        },
        { timeout: 20_000, interval: 50 },
      );
      expect(logs().find((l) => l.msg === 'stopping: not ready, still serving')?.signal).toBe(
        signal,
      );
      await exited;
    }, 60_000);
  }
});
