import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { valkeyUrl } from './helpers/store.js';

const CLI = fileURLToPath(new URL('../dist/src/cli/main.js', import.meta.url));
const MAIN = fileURLToPath(new URL('../dist/src/main.js', import.meta.url));

interface Exit {
  code: number | null;
  stderr: string;
}

/**
 * Runs `node <args>` to its end; a process still running after `limitMs` (a
 * service that started) is killed and reported as `started`.
 */
function run(args: string[], env: Record<string, string>, limitMs = 20_000): Promise<Exit> {
  // The config file under test says where Valkey is: the shell's VALKEY_URL or
  // VALKEY_CLUSTER_NODES would override it (and answer another question).
  const { VALKEY_URL: _u, VALKEY_CLUSTER_NODES: _n, ...inherited } = process.env;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, {
      env: { ...inherited, ...env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), limitMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, stderr: signal === 'SIGKILL' ? 'started' : stderr.trim() });
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), 'echostore-check-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const sqliteFile = join(dir, 'items.sqlite');
{
  const db = new Database(sqliteFile);
  db.exec('CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT)');
  db.close();
}
const certPem = join(dir, 'cert.pem');
const keyPem = join(dir, 'key.pem');
writeFileSync(certPem, '-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n');
writeFileSync(keyPem, '-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n');
const origin = 'http://127.0.0.1:9/items/{id}';
const valkey = () => ({ url: valkeyUrl() });
const http = (extra: object = {}) => ({ source: { kind: 'http', url: origin, ...extra } });
const sqlite = (extra: object = {}) => ({
  source: {
    kind: 'sqlite',
    file: sqliteFile,
    query: 'SELECT * FROM items WHERE id = ?',
    ...extra,
  },
});

/** Configurations `serve` refuses at start, each with the field its error names. */
const REFUSED: Array<{
  name: string;
  config: object;
  env?: Record<string, string>;
  field: string;
}> = [
  {
    name: 'warm.top on an http source',
    config: { tables: { t: { ...http(), warm: { top: 10 } } } },
    field: 'tables.t.warm.top',
  },
  {
    name: 'a bad query on a seeded sqlite file that exists',
    config: { tables: { t: sqlite({ seed: 'demo', query: 'SELEC id FROM items WHERE id = ?' }) } },
    field: 'tables.t.source.query',
  },
  {
    name: 'warm.top on an sqlite source without idsQuery',
    config: { tables: { t: { ...sqlite(), warm: { top: 10 } } } },
    field: 'tables.t.warm.top',
  },
  {
    name: 'a warm.file that cannot be read',
    config: { tables: { t: { ...http(), warm: { file: join(dir, 'no-such-ids.txt') } } } },
    field: 'tables.t.warm.file',
  },
  {
    name: 'a warm.file that never ends (/dev/zero)',
    config: { tables: { t: { ...http(), warm: { file: '/dev/zero' } } } },
    field: 'tables.t.warm.file',
  },
  {
    name: 'a valkey.passwordFile that never ends (/dev/zero)',
    config: { valkey: { url: valkeyUrl(), passwordFile: '/dev/zero' }, tables: { t: http() } },
    field: 'valkey.passwordFile',
  },
  ...(['caFile', 'certFile', 'keyFile'] as const).map((key) => ({
    name: `a valkey.tls.${key} that never ends (/dev/zero)`,
    config: {
      valkey: {
        url: 'rediss://127.0.0.1:9',
        // certFile and keyFile come in pairs: the other one is a (checked-by-label) PEM file.
        tls: {
          ...(key === 'caFile' ? {} : { certFile: certPem, keyFile: keyPem }),
          [key]: '/dev/zero',
        },
      },
      tables: { t: http() },
    },
    field: `valkey.tls.${key}`,
  })),
  {
    name: 'a missing sqlite file',
    config: { tables: { t: sqlite({ file: join(dir, 'missing.sqlite') }) } },
    field: 'tables.t.source.file',
  },
  {
    name: 'an sqlite query that does not compile',
    config: { tables: { t: sqlite({ query: 'SELECT * FROM nowhere WHERE id = ?' }) } },
    field: 'tables.t.source.query',
  },
  {
    name: 'an sqlite idsQuery that takes no limit',
    config: { tables: { t: sqlite({ idsQuery: 'SELECT id FROM items' }) } },
    field: 'tables.t.source.idsQuery',
  },
  {
    name: 'credentials in an http source URL',
    config: { tables: { t: http({ url: 'http://user:secret@127.0.0.1:9/items/{id}' }) } },
    field: 'tables.t.source.url',
  },
  {
    name: 'an http source URL that does not parse',
    config: { tables: { t: http({ url: 'http://[::1/items/{id}' }) } },
    field: 'tables.t.source.url',
  },
  {
    name: 'an http source URL with an unclosed bracket before {id}',
    config: { tables: { t: http({ url: 'http://[/{id}' }) } },
    field: 'tables.t.source.url',
  },
  {
    name: 'an http source URL with {id} as its host',
    config: { tables: { t: http({ url: 'http://{id}:43702/items/x' }) } },
    field: 'tables.t.source.url',
  },
  {
    name: 'an http source URL with {id} in its port',
    config: { tables: { t: http({ url: 'http://127.0.0.1:{id}/items/x' }) } },
    field: 'tables.t.source.url',
  },
  {
    name: 'a valkey.url that names no host',
    config: { valkey: { url: 'redis://' }, tables: { t: http() } },
    field: 'valkey.url',
  },
  {
    name: 'a valkey.url with a port but no host',
    config: { valkey: { url: 'redis://:6379/0' }, tables: { t: http() } },
    field: 'valkey.url',
  },
  {
    name: 'a postgres URL that names no database',
    config: {
      tables: {
        t: { source: { kind: 'postgres', url: 'postgres://u@127.0.0.1:9', query: 'SELECT 1' } },
      },
    },
    field: 'tables.t.source.url',
  },
  {
    name: 'a mysql query without its one ?',
    config: {
      tables: {
        t: {
          source: {
            kind: 'mysql',
            url: 'mysql://u@127.0.0.1:9/db',
            query: 'SELECT * FROM t WHERE id IN (?, ?)',
          },
        },
      },
    },
    field: 'tables.t.source.query',
  },
  {
    name: 'a cluster seed node on port 0',
    config: { valkey: { cluster: { nodes: ['127.0.0.1:0'] } }, tables: { t: http() } },
    field: 'valkey.cluster.nodes.0',
  },
  {
    name: 'an initialConcurrentLoads above maxConcurrentLoads',
    config: { tables: { t: { ...http(), maxConcurrentLoads: 2, initialConcurrentLoads: 50 } } },
    field: 'tables.t.initialConcurrentLoads',
  },
  {
    name: 'a trace endpoint with credentials',
    config: { tracing: { endpoint: 'http://user:pw@127.0.0.1:4318' }, tables: { t: http() } },
    field: 'tracing.endpoint',
  },
  {
    name: 'a trace endpoint that is not http',
    config: { tracing: { endpoint: 'ftp://127.0.0.1:4318' }, tables: { t: http() } },
    field: 'tracing.endpoint',
  },
  {
    name: 'the grpc protocol in the file',
    config: { tracing: { exporter: 'otlp', protocol: 'grpc' }, tables: { t: http() } },
    field: 'tracing.protocol',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_PROTOCOL=grpc',
    config: { tables: { t: http() } },
    env: { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
    field: 'tracing.protocol',
  },
  {
    name: 'an unknown OTEL_TRACES_EXPORTER',
    config: { tables: { t: http() } },
    env: { OTEL_TRACES_EXPORTER: 'zipkin' },
    field: 'tracing.exporter',
  },
  {
    name: 'an OTEL_EXPORTER_OTLP_ENDPOINT that does not parse',
    config: { tables: { t: http() } },
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://[bad' },
    field: 'tracing.endpoint',
  },
];

describe('check-config refuses what serve refuses, with the same coded error', () => {
  it.each(REFUSED)('$name', { timeout: 60_000 }, async ({ config, env = {}, field }) => {
    const file = join(mkdtempSync(join(dir, 'case-')), 'config.yaml');
    writeFileSync(file, stringify({ valkey: valkey(), ...config }));
    const [checked, served] = await Promise.all([
      run([CLI, 'check-config', '--config', file], env),
      run([MAIN, '--config', file], env),
    ]);
    expect(served.code, served.stderr).toBe(2);
    expect(served.stderr).toMatch(/^echostore: invalid configuration \(ECC_BAD_CONFIG\): /);
    expect(served.stderr).toContain(`${field}:`);
    expect(checked).toEqual(served);
  });

  it('refuses a configuration file that never ends (/dev/zero) with exit 2, naming it', async () => {
    const [checked, served] = await Promise.all([
      run([CLI, 'check-config', '--config', '/dev/zero'], {}),
      run([MAIN, '--config', '/dev/zero'], {}),
    ]);
    expect(served.code, served.stderr).toBe(2);
    expect(served.stderr).toMatch(
      /^echostore: invalid configuration \(ECC_BAD_CONFIG\): \/dev\/zero: .*more than 1048576 bytes/,
    );
    expect(checked).toEqual(served);
  });

  it('passes a configuration that serve starts on', async () => {
    const file = join(dir, 'good.yaml');
    writeFileSync(
      file,
      stringify({
        valkey: valkey(),
        tables: { a: http(), b: { ...sqlite({ idsQuery: 'SELECT id FROM items LIMIT ?' }) } },
      }),
    );
    const checked = await run([CLI, 'check-config', '--config', file], {});
    expect(checked).toEqual({ code: 0, stderr: '' });
  });
});
