import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { stringify } from 'yaml';
import { freePort, listeningPort } from '../harness/free-port.js';
import { HOLD_PREFIX, type Origin, startOrigin } from '../harness/origin.js';
import { type ServiceProcess, startServiceProcess } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

const CLI = fileURLToPath(new URL('../dist/src/cli/main.js', import.meta.url));
const TOKEN = 'cli-admin-token-0123456789';

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the real CLI (`dist/src/cli/main.js`, the package's `bin`) to its end. */
function cli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...process.env, ECHOSTORE_ADMIN_TOKEN: '', ECHOSTORE_URL: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('the echostore CLI against a running service', () => {
  const table = uniqueTable('cli');
  const shortL1 = uniqueTable('cli-l1');
  let origin: Origin;
  let service: ServiceProcess;
  let remote: string[];

  beforeAll(async () => {
    origin = await startOrigin(1, 20_000, {
      surrogateKey: (id) => (id.startsWith('tagged') ? 'blue red' : undefined),
    });
    service = await startServiceProcess(
      {
        valkey: { url: valkeyUrl() },
        // inspect reads the keys of the service's namespace, not the unnamed one's
        namespace: 'cli-inspect',
        http: { adminToken: TOKEN },
        tables: {
          [table]: { source: { kind: 'http', url: origin.template }, ttlMs: 60_000 },
          // A row leaves L1 after 1–1.2 s, long before its soft TTL.
          [shortL1]: {
            source: { kind: 'http', url: origin.template },
            ttlMs: 60_000,
            l1: { ttlMs: 1_000 },
          },
        },
      },
      { inHook: true },
    );
    remote = ['--url', service.url, '--token', TOKEN];
  });
  afterAll(async () => {
    service?.process.kill('SIGKILL');
    await origin?.close();
  });

  it('answers --help on every command, and a usage error with exit 64', async () => {
    for (const command of ['serve', 'inspect', 'purge', 'warm', 'stats', 'check-config']) {
      const r = await cli([command, '--help']);
      expect(r.code, command).toBe(0);
      expect(r.stdout, command).toContain(`Usage: echostore ${command}`);
    }
    const top = await cli(['--help']);
    expect(top.code).toBe(0);
    expect(top.stdout).toContain('check-config');
    expect((await cli(['nonsense'])).code).toBe(64);
    expect((await cli(['inspect', table])).code).toBe(64);
    expect((await cli(['stats', '--bogus'])).code).toBe(64);
  });

  it('inspects an id layer by layer: nothing, then L1 and L2 with their TTLs', async () => {
    const cold = await cli(['inspect', table, 'i1', '--json', ...remote]);
    expect(cold.code, cold.stderr).toBe(0);
    expect(JSON.parse(cold.stdout)).toEqual({ table, id: 'i1', l1: null, l2: null, lease: null });
    expect(origin.readsOf('i1')).toBe(0); // inspecting never loads

    expect((await fetch(`${service.url}/v1/tables/${table}/items/i1`)).status).toBe(200);
    const warm = JSON.parse((await cli(['inspect', table, 'i1', '--json', ...remote])).stdout);
    const { version } = warm.l2;
    expect(version).toBeGreaterThan(0);
    expect(warm.l1).toMatchObject({ version, negative: false }); // the row L1 holds is L2's
    expect(warm.l2).toMatchObject({ negative: false });
    for (const layer of [warm.l1, warm.l2]) {
      expect(layer.softTtlMs).toBeGreaterThan(50_000);
      expect(layer.softTtlMs).toBeLessThanOrEqual(72_000); // 60 s, jitter up to 20 %
      expect(layer.hardTtlMs).toBeGreaterThan(layer.softTtlMs);
    }
    const text = await cli(['inspect', table, 'i1', ...remote]);
    expect(text.stdout).toContain(`L1 (this instance): version ${version}, fresh for`);
    expect(text.stdout).toContain('lease:              none');
  });

  it('shows an L1 row past its L1 lifetime as absent, as a read would see it', async () => {
    expect((await fetch(`${service.url}/v1/tables/${shortL1}/items/e1`)).status).toBe(200);
    // Straight after the read (the route, not the CLI, whose start may take longer than 1 s).
    const fresh = await fetch(`${service.url}/v1/admin/tables/${shortL1}/items/e1`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(((await fresh.json()) as { l1: unknown }).l1).not.toBeNull();
    // The row stays in L1's LRU until a read drops it; inspect must stop showing it once expired.
    await vi.waitFor(
      async () => {
        const later = await cli(['inspect', shortL1, 'e1', '--json', ...remote]);
        expect(JSON.parse(later.stdout)).toMatchObject({ l1: null, l2: { negative: false } });
      },
      { timeout: 15_000, interval: 250 },
    );
    const text = await cli(['inspect', shortL1, 'e1', ...remote]);
    expect(text.stdout).toContain('L1 (this instance): none');
  });

  it('refuses a --timeout beyond a day, or not a positive integer, with exit 64', async () => {
    const notDecimal = ['0x10', '+5', '0b11', '1e3', ' 100', '100 ', '010', ''];
    for (const timeout of ['99999999999', '86400001', '0', '-5', '1.5', 'soon', ...notDecimal]) {
      const r = await cli(['inspect', table, 'x', '--timeout', timeout, ...remote]);
      expect(r.code, timeout).toBe(64);
      expect(r.stderr, timeout).toContain('--timeout');
    }
    expect((await cli(['stats', '--timeout', '86400000', ...remote])).code).toBe(0);
  });

  it('sends its requests under the path prefix of --url', async () => {
    // A proxy that serves the instance under /prefix/ only, and counts what it forwards.
    const target = new URL(service.url);
    const seen: string[] = [];
    const proxy = createServer((req, res) => {
      seen.push(req.url ?? '');
      if (!req.url?.startsWith('/prefix/')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not here');
        return;
      }
      const upstream = httpRequest(
        {
          host: target.hostname,
          port: target.port,
          method: req.method,
          path: req.url.slice('/prefix'.length),
          headers: req.headers,
        },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      req.pipe(upstream);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    try {
      const { port } = proxy.address() as AddressInfo;
      for (const url of [`http://127.0.0.1:${port}/prefix/`, `http://127.0.0.1:${port}/prefix`]) {
        const r = await cli(['stats', '--url', url, '--token', TOKEN]);
        expect(r.code, `${url}: ${r.stderr}`).toBe(0);
      }
      expect(seen).toEqual(['/prefix/v1/tables', '/prefix/v1/tables']);
      const query = await cli(['stats', '--url', `http://127.0.0.1:${port}/prefix/?a=1`]);
      expect(query.code).toBe(64);
    } finally {
      await new Promise((r) => proxy.close(r));
    }
  });

  it('shows the purge tags a row carries, in L1 and in the L2 value header', async () => {
    expect((await fetch(`${service.url}/v1/tables/${table}/items/tagged1`)).status).toBe(200);
    const r = JSON.parse((await cli(['inspect', table, 'tagged1', '--json', ...remote])).stdout);
    expect(r.l1.tags).toEqual(['blue', 'red']);
    expect(r.l2.tags).toEqual(['blue', 'red']);
    const text = await cli(['inspect', table, 'tagged1', ...remote]);
    expect(text.stdout).toMatch(/L1 \(this instance\): .*, tags blue red$/m);
    expect(text.stdout).toMatch(/L2 \(Valkey\): .*, tags blue red$/m);
    // An untagged row says so.
    await fetch(`${service.url}/v1/tables/${table}/items/plain1`);
    const plain = await cli(['inspect', table, 'plain1', ...remote]);
    expect(plain.stdout).toMatch(/L2 \(Valkey\): .*, no tags$/m);
    expect(
      JSON.parse((await cli(['inspect', table, 'plain1', '--json', ...remote])).stdout).l2.tags,
    ).toEqual([]);
  });

  it('shows a row a purge covers as purged, hard or soft, in L1 and L2', async () => {
    for (const id of ['tagged2', 'plain2'])
      await fetch(`${service.url}/v1/tables/${table}/items/${id}`);
    const before = JSON.parse(
      (await cli(['inspect', table, 'tagged2', '--json', ...remote])).stdout,
    );
    expect([before.l1.purged, before.l2.purged]).toEqual([null, null]);
    expect((await cli(['purge', table, '--tag', 'blue', '--soft', ...remote])).code).toBe(0);
    const soft = JSON.parse((await cli(['inspect', table, 'tagged2', '--json', ...remote])).stdout);
    expect([soft.l1.purged, soft.l2.purged]).toEqual(['soft', 'soft']);
    expect((await cli(['purge', table, '--tag', 'red', ...remote])).code).toBe(0);
    const text = await cli(['inspect', table, 'tagged2', ...remote]);
    expect(text.stdout).toMatch(
      /L1 \(this instance\):\s+version \d+, purged \(the next read reloads it\)/m,
    );
    expect(text.stdout).toMatch(
      /L2 \(Valkey\):\s+version \d+, purged \(the next read reloads it\)/m,
    );
    // An untagged row no table purge covers stays fresh.
    const plain = JSON.parse((await cli(['inspect', table, 'plain2', '--json', ...remote])).stdout);
    expect([plain.l1.purged, plain.l2.purged]).toEqual([null, null]);
  });

  it('names the lease holder while a load runs', async () => {
    const id = `${HOLD_PREFIX}cli`;
    const pending = fetch(`${service.url}/v1/tables/${table}/items/${id}`);
    expect(await origin.seen(id, 5_000)).toBe(true);
    const r = JSON.parse((await cli(['inspect', table, id, '--json', ...remote])).stdout);
    expect(r.lease.holder).toBe(`${hostname()}:${service.process.pid}`);
    expect(r.lease.ttlMs).toBeGreaterThan(0);
    origin.release(id);
    expect((await pending).status).toBe(200);
  });

  it('purges an id: the next read loads it again, counted at the source', async () => {
    await fetch(`${service.url}/v1/tables/${table}/items/p1`);
    expect(origin.readsOf('p1')).toBe(1);
    const r = await cli(['purge', table, 'p1', ...remote]);
    expect(r.code, r.stderr).toBe(0);
    const after = JSON.parse((await cli(['inspect', table, 'p1', '--json', ...remote])).stdout);
    expect(after.l1).toBeNull();
    expect(after.l2).toMatchObject({ negative: true }); // the tombstone
    await fetch(`${service.url}/v1/tables/${table}/items/p1`);
    expect(origin.readsOf('p1')).toBe(2);
  });

  it('refuses the ids and table names . and .. with exit 64: a URL would send them elsewhere', async () => {
    for (const args of [
      ['inspect', table, '.'],
      ['inspect', table, '..'],
      ['purge', table, '..'],
      ['inspect', '..', 'x'],
      ['purge', '.', '--all'],
      ['warm', '..', '1'],
    ]) {
      const r = await cli([...args, ...remote]);
      expect(r.code, r.stderr).toBe(64);
      expect(r.stderr).toContain('dot-segment');
    }
  });

  it('purges the whole table, soft or hard: the next read of each row loads it again', async () => {
    for (const id of ['a1', 'a2']) await fetch(`${service.url}/v1/tables/${table}/items/${id}`);
    expect([origin.readsOf('a1'), origin.readsOf('a2')]).toEqual([1, 1]);
    const r = await cli(['purge', table, '--all', ...remote]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^purged ${table}: every row, hard \\(epoch \\d+\\)`));
    for (const id of ['a1', 'a2']) await fetch(`${service.url}/v1/tables/${table}/items/${id}`);
    expect([origin.readsOf('a1'), origin.readsOf('a2')]).toEqual([2, 2]);
    const tags = await cli(['purge', table, '--tag', 'blue', '--tag', 'red', '--soft', ...remote]);
    expect(tags.code, tags.stderr).toBe(0);
    expect(tags.stdout).toContain('tags blue red, soft');
  });

  it('refuses a purge that names no target, or two, with the usage exit code', async () => {
    for (const args of [
      ['purge', table],
      ['purge', table, 'id', '--all'],
      ['purge', table, 'id', '--soft'],
      ['purge', table, '--all', '--tag', 'x'],
    ]) {
      const r = await cli([...args, ...remote]);
      expect(r.code, args.join(' ')).toBe(64);
      expect(r.stderr).toContain('Usage: echostore purge');
    }
  });

  it('warms ids from arguments and a file, and prints the stats', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'echostore-cli-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'ids.txt');
    writeFileSync(file, 'w3\nw4\n\n');
    const r = await cli(['warm', table, 'w1', 'w2', '--file', file, ...remote]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`${table}: 4 warmed, 0 not found, 0 failed`);
    for (const id of ['w1', 'w2', 'w3', 'w4']) expect(origin.readsOf(id), id).toBe(1);
    const s = await cli(['stats', '--json', '--url', service.url]);
    expect(s.code).toBe(0);
    const row = JSON.parse(s.stdout).tables.find((t: { name: string }) => t.name === table);
    expect(row.stats.l1_entries).toBeGreaterThanOrEqual(4);
    const text = await cli(['stats', '--url', service.url]);
    expect(text.stdout.split('\n')[0]).toMatch(/^table\s+l1_hit_ratio\s+hits/);
    expect(text.stdout).toContain(table);
  });

  it('exits 1 with the code when the instance refuses, 3 when it cannot be reached', async () => {
    const unauthorized = await cli(['purge', table, 'x', '--url', service.url]);
    expect(unauthorized.code).toBe(1);
    expect(unauthorized.stderr).toContain('ECC_UNAUTHORIZED');
    expect(unauthorized.stderr).toContain('--token or ECHOSTORE_ADMIN_TOKEN');
    const peek = await cli(['inspect', table, 'x', '--url', service.url, '--token', 'wrong-token']);
    expect(peek.code).toBe(1);
    expect(peek.stderr).toContain('ECC_UNAUTHORIZED');
    const unknown = await cli(['inspect', 'no-such-table', 'x', ...remote]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('ECC_UNKNOWN_TABLE');
    const port = await freePort(); // nothing listens there
    const down = await cli(['stats', '--url', `http://127.0.0.1:${port}`]);
    expect(down.code).toBe(3);
  });
});

describe('echostore check-config and serve', () => {
  const write = (config: object) => {
    const dir = mkdtempSync(join(tmpdir(), 'echostore-cli-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'config.yaml');
    writeFileSync(file, stringify(config));
    return file;
  };
  const good = () => ({
    valkey: { url: valkeyUrl() },
    tables: { t1: { source: { kind: 'http', url: 'http://127.0.0.1:9/items/{id}' } } },
  });

  it('check-config exits 0 for a valid file and 2 with the field for an invalid one', async () => {
    const ok = await cli(['check-config', '--config', write(good())]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain('valid (1 table: t1)');
    const bad = await cli(['check-config', '--config', write({ ...good(), tables: { t1: {} } })]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('ECC_BAD_CONFIG');
    expect(bad.stderr).toContain('tables.t1');
  });

  it('serve and check-config exit 64 for an unknown argument or a --config without a file', {
    timeout: 60_000,
  }, async () => {
    const argvs = [['--bogus'], ['--config'], ['--config='], ['--config', '--bogus'], ['x']];
    const lines = argvs.flatMap((args) => [
      ['serve', ...args],
      ['check-config', ...args],
    ]);
    const runs = await Promise.all(lines.map((line) => cli(line)));
    for (const [i, r] of runs.entries()) {
      const [command] = lines[i] as string[];
      expect(r.code, (lines[i] as string[]).join(' ')).toBe(64);
      expect(r.stderr).toContain(`echostore ${command}:`);
      expect(r.stderr).toContain(`Usage: echostore ${command}`);
    }
    const entry = fileURLToPath(new URL('../dist/src/main.js', import.meta.url));
    const child = spawn(process.execPath, [entry, '--bogus'], { stdio: 'ignore' });
    expect(await new Promise((resolve) => child.on('close', resolve))).toBe(64);
  });

  it('serve runs the service until SIGTERM', async () => {
    const child = spawn(process.execPath, [CLI, 'serve', '--config', write(good())], {
      env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent' },
      stdio: 'ignore',
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    try {
      // The port it listens on, from the OS: no other process can answer in its place.
      await vi.waitFor(
        async () => {
          const port = listeningPort(child.pid as number);
          expect(port).toBeDefined();
          expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
        },
        { timeout: 15_000, interval: 100 },
      );
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
  }, 30_000);
});
