/**
 * The real service (`dist/src/main.js`, built by `pretest`) as a child
 * process, for what only a process shows: signals, start-up order, exit codes.
 * Its log lines (pino JSON on stdout) are kept for the test to read.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { onTestFinished, vi } from 'vitest';
import { stringify } from 'yaml';
import { listeningPort } from '../../harness/free-port.js';

const MAIN = fileURLToPath(new URL('../../dist/src/main.js', import.meta.url));

/** A running service process. */
export interface ServiceProcess {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  process: ChildProcess;
  /** Log lines so far, parsed (lines that are not JSON are skipped). */
  logs(): Array<Record<string, unknown> & { msg?: string }>;
  /** Resolves with the exit code (or the signal's name) once the process has exited. */
  exited: Promise<number | string>;
}

/**
 * Writes `config` to a temporary YAML file in `dir` (a new temporary directory
 * by default: relative paths in `config` resolve against it), starts the
 * service on port 0 (on `host`, default 127.0.0.1), learns the port it listens
 * on from the OS ({@link listeningPort}), and waits until `/healthz` there
 * answers: what answers is this process, never another that took a port
 * picked free beforehand. Killed when the
 * test ends if it is still running, unless `inHook` (started in a `beforeAll`:
 * the caller kills it).
 */
export async function startServiceProcess(
  config: object,
  options: { dir?: string; env?: Record<string, string>; inHook?: boolean; host?: string } = {},
): Promise<ServiceProcess> {
  const owned = options.dir === undefined;
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'echostore-test-'));
  const file = join(dir, 'config.yaml');
  writeFileSync(file, stringify(config));
  const child = spawn(process.execPath, [MAIN, '--config', file], {
    env: {
      ...process.env,
      PORT: '0',
      HOST: options.host ?? '127.0.0.1',
      LOG_LEVEL: 'info',
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  // A folder of the caller's (`dir`) stays; one made here goes with the process, or with the
  // test (its end may come before the exit is seen: the worker may be gone by then).
  const removeDir = () => {
    if (owned) rmSync(dir, { recursive: true, force: true });
  };
  if (options.inHook !== true) {
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      removeDir();
    });
  }
  let out = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
  });
  const exited = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')),
  );
  child.once('exit', removeDir);
  const url = await vi.waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`the service exited with ${child.exitCode}`);
      const port = listeningPort(child.pid as number);
      if (port === undefined) throw new Error('the service is not listening yet');
      const url = `http://${options.host ?? '127.0.0.1'}:${port}`;
      const r = await fetch(`${url}/healthz`);
      if (!r.ok) throw new Error(`/healthz answered ${r.status}`);
      return url;
    },
    { timeout: 15_000, interval: 50 },
  );
  return {
    url,
    process: child,
    exited,
    logs: () =>
      out.split('\n').flatMap((line) => {
        try {
          return [JSON.parse(line)];
        } catch {
          return [];
        }
      }),
  };
}

/**
 * GETs an item of a running service with `headers` and returns what the read-your-writes tests
 * judge: status, the JSON body, and the caching headers.
 */
export async function readItem(
  url: string,
  table: string,
  id: number | string,
  headers: Record<string, string> = {},
) {
  const r = await fetch(`${url}/v1/tables/${table}/items/${id}`, { headers });
  const body = (await r.json()) as { version?: number; error?: { code: string } };
  return {
    status: r.status,
    body,
    cacheStatus: r.headers.get('cache-status') ?? '',
    cacheControl: r.headers.get('cache-control'),
    vary: r.headers.get('vary'),
  };
}
