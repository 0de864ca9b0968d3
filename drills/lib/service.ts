/**
 * Runs the real service (`dist/src/main.js`) as a child process for drills
 * that go through the HTTP API.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { freePort } from '../../harness/free-port.js';

/** A running service instance. */
export interface Service {
  /** Base URL, e.g. `http://127.0.0.1:40124`. */
  url: string;
  process: ChildProcess;
  /** Sends SIGTERM and waits for the exit (SIGKILL after `graceMs`). */
  stop(graceMs?: number): Promise<void>;
}

const MAIN = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/main.js');

/**
 * Writes `config` (the service's config file shape) to a temporary YAML file,
 * starts the service on a free port, and waits until `/readyz` answers.
 *
 * @throws {Error} when the service exits or is not ready within `readyTimeoutMs`.
 */
export async function startService(config: object, readyTimeoutMs = 15_000): Promise<Service> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'echostore-drill-'));
  const file = join(dir, 'config.yaml');
  writeFileSync(file, stringify(config));
  const child = spawn(process.execPath, [MAIN, '--config', file], {
    env: {
      ...process.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<void>((ok) => child.once('exit', () => ok()));
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the service exited with code ${child.exitCode}`);
    try {
      const r = await fetch(`${url}/readyz`);
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`the service was not ready within ${readyTimeoutMs} ms`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    process: child,
    async stop(graceMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Reads one sample of a Prometheus counter or gauge from `<url>/metrics`; 0 when absent. */
export async function scrape(
  url: string,
  name: string,
  labels: Record<string, string>,
): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const labelText = line.slice(name.length + 1, line.indexOf('}'));
    if (want.every((w) => labelText.split(',').includes(w))) return Number(line.split(' ').pop());
  }
  return 0;
}
