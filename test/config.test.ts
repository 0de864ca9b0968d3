import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MANAGED_CLUSTER_EXAMPLE } from '../src/config/doc.js';
import { loadConfig } from '../src/config/load.js';
import { configSchema, SOURCE_SCHEMAS, TableSchema } from '../src/config/schema.js';
import { ConfigError, EchoStoreError } from '../src/errors.js';
import { DEFAULT_POLICY, resolvePolicy } from '../src/store/policy.js';
import { createStore, type TableOptions } from '../src/store/store.js';
import { errorOf, openStore } from './helpers/probe.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'echostore-config-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Writes `text` to `<dir>/<name>` and returns its path. */
function write(name: string, text: string): string {
  const file = join(dir, name);
  writeFileSync(file, text);
  return file;
}

/** What `loadConfig` threw. */
function failure(fn: () => unknown): EchoStoreError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(EchoStoreError);
    return err as EchoStoreError;
  }
  throw new Error('expected loadConfig to fail');
}

const HTTP_SOURCE = '{ kind: http, url: "http://127.0.0.1:9000/p/{id}" }';

describe('loadConfig without a file', () => {
  it('serves the built-in demo table with every default', () => {
    const config = loadConfig({ argv: [], env: {}, cwd: dir });
    expect(config).toEqual({
      origin: 'built-in demo',
      // Its own namespace: a library store on the same Valkey never reads the demo's rows.
      namespace: 'demo',
      valkey: {
        url: 'redis://127.0.0.1:6379',
        commandTimeoutMs: 1000,
        connectTimeoutMs: 2000,
        coherence: true,
      },
      http: {
        host: '127.0.0.1',
        port: 8080,
        bodyLimitBytes: 1_048_576,
        maxBatchBytes: 67_108_864,
        shutdownDelayMs: 5_000,
        requestTimeoutMs: 30_000,
      },
      log: { level: 'info', accessSampleRate: 0 },
      tables: {
        products: {
          source: {
            kind: 'sqlite',
            file: join(dir, 'data', 'demo.sqlite'),
            query:
              'SELECT id, sku, name, category, price_cents, stock, description FROM products WHERE id = ?',
            seed: 'demo',
            tagsColumn: 'category',
          },
          idPattern: '^[1-9][0-9]{0,9}$',
        },
      },
    });
  });

  it('keeps the demo catalog in ECHOSTORE_DATA_DIR', () => {
    const config = loadConfig({ argv: [], env: { ECHOSTORE_DATA_DIR: 'state' }, cwd: dir });
    const source = config.tables.products?.source;
    expect(source?.kind === 'sqlite' && source.file).toBe(join(dir, 'state', 'demo.sqlite'));
  });
});

describe('loadConfig with a file', () => {
  it('reads a YAML file named by --config and fills in the defaults', () => {
    const file = write(
      'service.yaml',
      `# comment\nhttp:\n  port: 9090\ntables:\n  products:\n    source: ${HTTP_SOURCE}\n    ttlMs: 60000\n    l1: { maxEntries: 100 }\n`,
    );
    const config = loadConfig({ argv: ['--config', file], env: {} });
    // Anything else on the command line is a mistake, never a silent start on the demo.
    for (const argv of [['--confg', file], [file]]) {
      expect(() => loadConfig({ argv, env: {} })).toThrow(
        expect.objectContaining({ code: 'ECC_BAD_CONFIG' }),
      );
    }
    expect(config.origin).toBe(file);
    expect(config.http).toEqual({
      host: '127.0.0.1',
      port: 9090,
      bodyLimitBytes: 1_048_576,
      maxBatchBytes: 67_108_864,
      shutdownDelayMs: 5_000,
      requestTimeoutMs: 30_000,
    });
    expect(config.valkey.url).toBe('redis://127.0.0.1:6379');
    expect(config.tables).toEqual({
      products: {
        source: { kind: 'http', url: 'http://127.0.0.1:9000/p/{id}' },
        ttlMs: 60_000,
        l1: { maxEntries: 100 },
      },
    });
  });

  it('reads a JSON file named by --config=', () => {
    const file = write(
      'service.json',
      JSON.stringify({
        valkey: { url: 'rediss://cache.internal:6380', commandTimeoutMs: 250 },
        log: { level: 'debug' },
        tables: { users: { source: { kind: 'http', url: 'https://api/u/{id}', timeoutMs: 500 } } },
      }),
    );
    const config = loadConfig({ argv: [`--config=${file}`], env: {} });
    expect(config.valkey).toEqual({
      url: 'rediss://cache.internal:6380',
      commandTimeoutMs: 250,
      connectTimeoutMs: 2000,
      coherence: true,
    });
    expect(config.log.level).toBe('debug');
    expect(config.tables.users?.source).toEqual({
      kind: 'http',
      url: 'https://api/u/{id}',
      timeoutMs: 500,
    });
  });

  it("reads postgres and mysql sources as written (their defaults are the source's to apply)", () => {
    const file = write(
      'sql.yaml',
      'tables:\n  a: { source: { kind: postgres, url: "postgres://u@h:5432/db", query: "SELECT id FROM t WHERE id = ANY($1)" }, maxBatchSize: 50 }\n' +
        '  b: { source: { kind: mysql, url: "mysql://u@h/db", query: "SELECT id FROM t WHERE id IN (?)", idColumn: code, poolSize: 2, seed: demo } }\n',
    );
    const config = loadConfig({ argv: ['--config', file], env: {} });
    // Anything else on the command line is a mistake, never a silent start on the demo.
    for (const argv of [['--confg', file], [file]]) {
      expect(() => loadConfig({ argv, env: {} })).toThrow(
        expect.objectContaining({ code: 'ECC_BAD_CONFIG' }),
      );
    }
    expect(config.tables.a).toEqual({
      source: {
        kind: 'postgres',
        url: 'postgres://u@h:5432/db',
        query: 'SELECT id FROM t WHERE id = ANY($1)',
      },
      maxBatchSize: 50,
    });
    expect(config.tables.b?.source).toMatchObject({ kind: 'mysql', idColumn: 'code', poolSize: 2 });
  });

  it('reads the file named by ECHOSTORE_CONFIG, relative to cwd', () => {
    write('env.yml', `tables:\n  a: { source: ${HTTP_SOURCE} }\n`);
    const config = loadConfig({ argv: [], env: { ECHOSTORE_CONFIG: 'env.yml' }, cwd: dir });
    expect(config.origin).toBe(join(dir, 'env.yml'));
    expect(Object.keys(config.tables)).toEqual(['a']);
  });

  it('prefers --config over ECHOSTORE_CONFIG', () => {
    const chosen = write('chosen.yaml', `tables:\n  chosen: { source: ${HTTP_SOURCE} }\n`);
    const config = loadConfig({
      argv: ['--config', chosen],
      env: { ECHOSTORE_CONFIG: join(dir, 'does-not-exist.yaml') },
    });
    expect(Object.keys(config.tables)).toEqual(['chosen']);
  });

  it('resolves a relative sqlite file against the config file directory', () => {
    const file = write(
      'sqlite.yaml',
      'tables:\n  t:\n    source: { kind: sqlite, file: db/items.sqlite, query: "SELECT * FROM t WHERE id = ?" }\n',
    );
    const source = loadConfig({ argv: ['--config', file], env: {}, cwd: '/' }).tables.t?.source;
    expect(source?.kind === 'sqlite' && source.file).toBe(join(dir, 'db', 'items.sqlite'));
  });

  it('accepts the example configuration shipped in config/', () => {
    const config = loadConfig({ argv: ['--config', 'config/example.yaml'], env: {} });
    expect(Object.keys(config.tables)).toEqual(['products', 'users']);
    expect(config.tables.products?.source.kind).toBe('sqlite');
    expect(config.tables.users?.source.kind).toBe('http');
    expect(config.origin).toBe(resolve('config/example.yaml'));
  });

  it('mentions every field of the schema in the example configuration, set or commented out', () => {
    const text = readFileSync('config/example.yaml', 'utf8');
    /** Every property of an object schema, nested objects and arrays of objects included, as dotted paths. */
    const fields = (schema: object, path: string): string[] =>
      Object.entries((schema as { properties?: Record<string, object> }).properties ?? {}).flatMap(
        ([name, field]) => {
          const items = (field as { items?: object }).items;
          return [
            `${path}${name}`,
            ...fields(field, `${path}${name}.`),
            ...(items === undefined ? [] : fields(items, `${path}${name}[].`)),
          ];
        },
      );
    const all = [
      ...fields(configSchema, ''),
      ...fields(TableSchema, 'tables.<name>.'),
      ...Object.entries(SOURCE_SCHEMAS).flatMap(([kind, schema]) =>
        fields(schema, `tables.<name>.source(${kind}).`),
      ),
    ];
    expect(all).toContain('tables.<name>.cacheHeaders');
    expect(all).toContain('tables.<name>.source(postgres).follow.tables[].idColumn');
    const missing = all.filter((path) => {
      const name = path.slice(path.lastIndexOf('.') + 1);
      return !new RegExp(`(^|[\\s#{,])${name}:`, 'm').test(text);
    });
    expect(missing, 'add each to config/example.yaml with a comment').toEqual([]);
  });
});

describe('loadConfig environment overrides', () => {
  it('applies VALKEY_URL, HOST, PORT and LOG_LEVEL over the file', () => {
    const file = write(
      'overridden.yaml',
      `valkey: { url: "redis://file:1" }\nhttp: { host: file, port: 1 }\nlog: { level: warn }\ntables:\n  t: { source: ${HTTP_SOURCE} }\n`,
    );
    const config = loadConfig({
      argv: ['--config', file],
      env: { VALKEY_URL: 'redis://env:6379/2', HOST: '0.0.0.0', PORT: '0', LOG_LEVEL: 'trace' },
    });
    expect(config.valkey.url).toBe('redis://env:6379/2');
    expect(config.http).toEqual({
      host: '0.0.0.0',
      port: 0,
      bodyLimitBytes: 1_048_576,
      maxBatchBytes: 67_108_864,
      shutdownDelayMs: 5_000,
      requestTimeoutMs: 30_000,
    });
    expect(config.log.level).toBe('trace');
  });

  it('applies overrides to the built-in demo too, ignoring empty variables', () => {
    const config = loadConfig({ argv: [], env: { PORT: '3000', HOST: '' }, cwd: dir });
    expect(config.http.port).toBe(3000);
    expect(config.http.host).toBe('127.0.0.1');
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '65536'],
    ['PORT', '-1'],
    ['VALKEY_URL', 'http://127.0.0.1:6379'],
    ['LOG_LEVEL', 'loud'],
    ['ECHOSTORE_ADMIN_TOKEN', 'short'],
    ['ECHOSTORE_NAMESPACE', 'Has:Colon'],
  ])('rejects %s=%s as ECC_BAD_CONFIG naming the variable', (name, value) => {
    const err = failure(() => loadConfig({ argv: [], env: { [name]: value }, cwd: dir }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(name);
  });
});

describe('loadConfig namespace', () => {
  const tables = `tables:\n  t: { source: ${HTTP_SOURCE} }\n`;

  it('is unset by default in a file (the unnamed namespace), read from the file, and overridden by ECHOSTORE_NAMESPACE', () => {
    expect(
      loadConfig({ argv: ['--config', write('ns0.yaml', tables)], env: {} }).namespace,
    ).toBeUndefined();
    const file = write('ns.yaml', `namespace: shop\n${tables}`);
    expect(loadConfig({ argv: ['--config', file], env: {} }).namespace).toBe('shop');
    const env = { ECHOSTORE_NAMESPACE: 'shop-eu' };
    expect(loadConfig({ argv: ['--config', file], env }).namespace).toBe('shop-eu');
    expect(loadConfig({ argv: [], env, cwd: dir }).namespace).toBe('shop-eu');
  });

  it('rejects a namespace that is not [a-z0-9_-]{1,64}, naming the field', () => {
    const err = failure(() =>
      loadConfig({
        argv: ['--config', write('ns-bad.yaml', `namespace: "a:b"\n${tables}`)],
        env: {},
      }),
    );
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as { field?: string }).field).toBe('namespace');
  });
});

describe('loadConfig valkey.url', () => {
  const tables = `tables:\n  t: { source: ${HTTP_SOURCE} }\n`;

  it.each([
    'redis://cache.internal',
    'redis://127.0.0.1:1/0',
    'rediss://user:pw@[::1]:65535/15',
    'redis://:pw@cache/',
  ])('accepts %s', (url) => {
    const file = write('good-url.yaml', `valkey: { url: "${url}" }\n${tables}`);
    expect(loadConfig({ argv: ['--config', file], env: {} }).valkey.url).toBe(url);
  });

  const bad = [
    ['an unparseable host', 'redis://[bad'],
    ['a port above 65535', 'redis://127.0.0.1:99999'],
    ['port 0', 'redis://127.0.0.1:0'],
    ['a db index above 15', 'redis://127.0.0.1:6379/16'],
    ['a db index that is not a number', 'redis://127.0.0.1:6379/cache'],
  ];

  it.each(bad)('rejects %s in the file, naming valkey.url', (_, url) => {
    const file = write('bad-url.yaml', `valkey: { url: "${url}" }\n${tables}`);
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(`${file}: valkey.url:`);
  });

  it.each(bad)('rejects %s in VALKEY_URL, naming the variable and valkey.url', (_, url) => {
    const err = failure(() => loadConfig({ argv: [], env: { VALKEY_URL: url }, cwd: dir }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain('environment variable VALKEY_URL: valkey.url:');
  });

  it.each([
    ['a db index above 15', 'redis://user:hunter2-secret@127.0.0.1:6379/16'],
    ['another scheme', 'http://user:hunter2-secret@127.0.0.1:6379'],
  ])('does not repeat the password of a URL with %s rejected in the file', (_, url) => {
    const file = write('secret-url.yaml', `valkey: { url: "${url}" }\n${tables}`);
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.message).toContain(`${file}: valkey.url:`);
    expect(err.message).not.toContain('hunter2-secret');
  });

  it('does not repeat the password of a rejected URL', () => {
    const env = { VALKEY_URL: 'redis://user:hunter2-secret@127.0.0.1:99999' };
    const err = failure(() => loadConfig({ argv: [], env, cwd: dir }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).not.toContain('hunter2-secret');
  });
});

describe('loadConfig valkey.cluster and valkey.sentinel', () => {
  const tables = `tables:\n  t: { source: ${HTTP_SOURCE} }\n`;
  const load = (valkey: string, env: Record<string, string> = {}) =>
    loadConfig({ argv: ['--config', write('mode.yaml', `valkey: ${valkey}\n${tables}`)], env });

  it('reads the seed nodes of a cluster and the Sentinels of a primary', () => {
    const cluster = load('{ cluster: { nodes: ["10.0.0.1:7000", "[::1]:7001"] } }');
    expect(cluster.valkey.cluster).toEqual({ nodes: ['10.0.0.1:7000', '[::1]:7001'] });
    const sentinel = load('{ sentinel: { sentinels: ["10.0.0.1:26379"], name: cache } }');
    expect(sentinel.valkey.sentinel).toEqual({ sentinels: ['10.0.0.1:26379'], name: 'cache' });
  });

  it.each([
    ['url and cluster', '{ url: "redis://a:1", cluster: { nodes: ["a:1"] } }', 'valkey.cluster'],
    [
      'url and sentinel',
      '{ url: "redis://a:1", sentinel: { sentinels: ["a:1"], name: m } }',
      'valkey.sentinel',
    ],
    [
      'cluster and sentinel',
      '{ cluster: { nodes: ["a:1"] }, sentinel: { sentinels: ["a:1"], name: m } }',
      'valkey.sentinel',
    ],
    ['an empty node list', '{ cluster: { nodes: [] } }', 'valkey.cluster.nodes'],
    ['a node without a port', '{ cluster: { nodes: ["a"] } }', 'valkey.cluster.nodes.0'],
    [
      'a Sentinel set without a name',
      '{ sentinel: { sentinels: ["a:1"] } }',
      'valkey.sentinel.name',
    ],
    [
      'an empty Sentinel list',
      '{ sentinel: { sentinels: [], name: m } }',
      'valkey.sentinel.sentinels',
    ],
  ])('rejects %s, naming the field', (_, valkey, field) => {
    const err = failure(() => load(valkey));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe(field);
    expect(err.message).toContain(`: ${field}: `);
  });

  it('takes the cluster from VALKEY_CLUSTER_NODES over a url, and a url from VALKEY_URL over a cluster', () => {
    const env = { VALKEY_CLUSTER_NODES: ' 10.0.0.1:7000, 10.0.0.2:7000 ' };
    expect(load('{ url: "redis://file:1" }', env).valkey.cluster).toEqual({
      nodes: ['10.0.0.1:7000', '10.0.0.2:7000'],
    });
    const single = load('{ cluster: { nodes: ["a:1"] } }', { VALKEY_URL: 'redis://env:1' });
    expect(single.valkey).toMatchObject({ url: 'redis://env:1' });
    expect(single.valkey.cluster).toBeUndefined();
  });

  it.each([
    [
      'both VALKEY_URL and VALKEY_CLUSTER_NODES',
      { VALKEY_URL: 'redis://a:1', VALKEY_CLUSTER_NODES: 'a:1' },
      'valkey.cluster',
    ],
    ['an empty VALKEY_CLUSTER_NODES list', { VALKEY_CLUSTER_NODES: ' , ' }, 'valkey.cluster.nodes'],
    [
      'a VALKEY_CLUSTER_NODES node without a port',
      { VALKEY_CLUSTER_NODES: 'a:1,b' },
      'valkey.cluster.nodes.1',
    ],
  ])('rejects %s, naming the variable and the field', (_, env, field) => {
    const err = failure(() => loadConfig({ argv: [], env, cwd: dir }));
    expect((err as ConfigError).field).toBe(field);
    expect(err.message).toMatch(/^environment variables? VALKEY_/);
  });
});

describe('loadConfig valkey.tls', () => {
  const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
  const withTls = (tls: string) =>
    `valkey: { url: "rediss://cache.internal:6380", tls: ${tls} }\ntables:\n  t: { source: ${HTTP_SOURCE} }\n`;

  it('has no default', () => {
    expect(loadConfig({ argv: [], env: {}, cwd: dir }).valkey.tls).toBeUndefined();
  });

  it('passes caFile (resolved against the config file directory), rejectUnauthorized (default true) and servername through', () => {
    write('valkey-ca.pem', PEM);
    const file = write(
      'tls.yaml',
      withTls('{ caFile: valkey-ca.pem, servername: cache.internal }'),
    );
    const config = loadConfig({ argv: ['--config', file], env: {}, cwd: '/' });
    expect(config.valkey).toEqual({
      url: 'rediss://cache.internal:6380',
      commandTimeoutMs: 1000,
      connectTimeoutMs: 2000,
      coherence: true,
      tls: {
        caFile: join(dir, 'valkey-ca.pem'),
        rejectUnauthorized: true,
        servername: 'cache.internal',
      },
    });
    const insecure = write('tls-insecure.yaml', withTls('{ rejectUnauthorized: false }'));
    expect(loadConfig({ argv: ['--config', insecure], env: {} }).valkey.tls).toEqual({
      rejectUnauthorized: false,
    });
  });

  it.each([
    ['cannot be read', () => 'missing-ca.pem'],
    ['holds no PEM certificate', () => write('not-a-ca.pem', 'just text\n')],
  ])('rejects a caFile that %s, naming valkey.tls.caFile', (_, caFile) => {
    const file = write('bad-ca.yaml', withTls(`{ caFile: "${caFile()}" }`));
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(`${file}: valkey.tls.caFile:`);
  });

  it('rejects a valkey.tls that a redis:// URL would not use', () => {
    const file = write(
      'unused-tls.yaml',
      `valkey: { url: "redis://:s3cret@cache.internal:6379", tls: { rejectUnauthorized: true } }\ntables:\n  t: { source: ${HTTP_SOURCE} }\n`,
    );
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe('valkey.tls');
    expect(err.message).not.toContain('s3cret');
  });

  it.each([
    ['a cluster', 'cluster: { nodes: ["127.0.0.1:7000"] }'],
    ['Sentinel', 'sentinel: { name: m, sentinels: ["127.0.0.1:26379"] }'],
  ])(
    'takes valkey.tls with %s, a client certificate and key resolved against the file',
    (_, connection) => {
      write('client.pem', PEM);
      write('client.key', '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n');
      const file = write(
        'tls-topology.yaml',
        `valkey: { ${connection}, tls: { certFile: client.pem, keyFile: client.key } }\ntables:\n  t: { source: ${HTTP_SOURCE} }\n`,
      );
      expect(loadConfig({ argv: ['--config', file], env: {}, cwd: '/' }).valkey.tls).toEqual({
        certFile: join(dir, 'client.pem'),
        keyFile: join(dir, 'client.key'),
        rejectUnauthorized: true,
      });
    },
  );

  it.each([
    ['a certFile without keyFile', '{ certFile: client.pem }', 'valkey.tls.keyFile'],
    ['a keyFile without certFile', '{ keyFile: client.key }', 'valkey.tls.certFile'],
    [
      'a keyFile that holds no key',
      '{ certFile: client.pem, keyFile: client.pem }',
      'valkey.tls.keyFile',
    ],
    [
      'a certFile that cannot be read',
      '{ certFile: none.pem, keyFile: client.key }',
      'valkey.tls.certFile',
    ],
  ])('rejects %s, naming %s', (_, tls, field) => {
    write('client.pem', PEM);
    write('client.key', '-----BEGIN EC PRIVATE KEY-----\nMIIB\n-----END EC PRIVATE KEY-----\n');
    const file = write('bad-client-cert.yaml', withTls(tls));
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe(field);
  });

  it('says the TLS settings are unused before looking at their CA file', () => {
    const file = write(
      'unused-tls-ca.yaml',
      `valkey: { url: "redis://127.0.0.1:6379", tls: { caFile: missing-ca.pem } }\ntables:\n  t: { source: ${HTTP_SOURCE} }\n`,
    );
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect((err as ConfigError).field).toBe('valkey.tls');
  });

  it('rejects valkey.tls when VALKEY_URL replaces a rediss:// URL with a redis:// one', () => {
    const file = write('tls-env.yaml', withTls('{ rejectUnauthorized: true }'));
    const err = failure(() =>
      loadConfig({ argv: ['--config', file], env: { VALKEY_URL: 'redis://127.0.0.1:6379' } }),
    );
    expect((err as ConfigError).field).toBe('valkey.tls');
    expect(
      loadConfig({ argv: ['--config', file], env: { VALKEY_URL: 'rediss://other:6380' } }).valkey
        .url,
    ).toBe('rediss://other:6380');
  });

  it.each([
    ['an unknown field', '{ verify: false }', 'valkey.tls.verify: is not a known field'],
    [
      'a rejectUnauthorized that is not a boolean',
      '{ rejectUnauthorized: "no" }',
      'valkey.tls.rejectUnauthorized: must be boolean',
    ],
    ['an empty servername', '{ servername: "" }', 'valkey.tls.servername:'],
  ])('rejects %s', (_, tls, message) => {
    const file = write('bad-tls.yaml', withTls(tls));
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(`${file}: ${message}`);
  });
});

describe('loadConfig valkey credentials', () => {
  const SECRET = 'pw-5e1f-never-echoed';
  const withValkey = (valkey: string) =>
    `valkey: { ${valkey} }\ntables:\n  t: { source: ${HTTP_SOURCE} }\n`;

  it('takes a username and a password file resolved against the file, for the data nodes and the Sentinels', () => {
    write('valkey.secret', `${SECRET}\n`);
    write('sentinel.secret', `${SECRET}\n`);
    const file = write(
      'credentials.yaml',
      withValkey(
        'sentinel: { name: m, sentinels: ["127.0.0.1:26379"], passwordFile: sentinel.secret }, username: echostore, passwordFile: valkey.secret',
      ),
    );
    const { valkey } = loadConfig({ argv: ['--config', file], env: {}, cwd: '/' });
    expect(valkey.username).toBe('echostore');
    expect(valkey.passwordFile).toBe(join(dir, 'valkey.secret'));
    expect(valkey.sentinel?.passwordFile).toBe(join(dir, 'sentinel.secret'));
  });

  it('loads the managed-cluster example of docs/configuration.md', () => {
    write('valkey-ca.pem', '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
    write('client.pem', '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
    write('client.key', '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n');
    mkdirSync(join(dir, 'secrets'), { recursive: true });
    write('secrets/valkey-password', `${SECRET}\n`);
    const file = write('managed.yaml', MANAGED_CLUSTER_EXAMPLE);
    const { valkey } = loadConfig({ argv: ['--config', file], env: {} });
    expect(valkey.cluster?.nodes).toHaveLength(1);
    expect(valkey.tls?.keyFile).toBe(join(dir, 'client.key'));
    expect(valkey.passwordFile).toBe(join(dir, 'secrets/valkey-password'));
  });

  it.each([
    ['a password file that cannot be read', 'passwordFile: missing.secret', 'valkey.passwordFile'],
    ['an empty password file', 'passwordFile: empty.secret', 'valkey.passwordFile'],
    [
      'a password and a password file',
      `password: ${SECRET}, passwordFile: valkey.secret`,
      'valkey.password',
    ],
    ['a username without a password', 'username: echostore', 'valkey.username'],
    [
      'a password in the URL and valkey.password',
      `url: "redis://u:${SECRET}@127.0.0.1:6379", password: ${SECRET}`,
      'valkey.password',
    ],
    [
      'a Sentinel password file that cannot be read',
      'sentinel: { name: m, sentinels: ["127.0.0.1:26379"], passwordFile: missing.secret }',
      'valkey.sentinel.passwordFile',
    ],
    [
      'a Sentinel username without a password',
      'sentinel: { name: m, sentinels: ["127.0.0.1:26379"], username: s }',
      'valkey.sentinel.username',
    ],
  ])('rejects %s, naming %s and quoting no password', (_, valkey, field) => {
    write('valkey.secret', `${SECRET}\n`);
    write('empty.secret', '\n');
    const file = write('bad-credentials.yaml', withValkey(valkey));
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe(field);
    expect(err.message).not.toContain(SECRET);
  });
});

describe('loadConfig http.adminToken', () => {
  const token = 'file-token-0123456789';
  const withToken = (value: string) =>
    `http: { adminToken: "${value}" }\ntables:\n  t: { source: ${HTTP_SOURCE} }\n`;

  it('has no default', () => {
    expect(loadConfig({ argv: [], env: {}, cwd: dir }).http.adminToken).toBeUndefined();
  });

  it('reads it from the file', () => {
    const file = write('token.yaml', withToken(token));
    expect(loadConfig({ argv: ['--config', file], env: {} }).http.adminToken).toBe(token);
  });

  it('lets ECHOSTORE_ADMIN_TOKEN override the file, an empty variable counting as unset', () => {
    const file = write('token-env.yaml', withToken(token));
    const fromEnv = 'env-token-abcdefghijkl';
    const argv = ['--config', file];
    const overridden = loadConfig({ argv, env: { ECHOSTORE_ADMIN_TOKEN: fromEnv } });
    expect(overridden.http.adminToken).toBe(fromEnv);
    expect(loadConfig({ argv, env: { ECHOSTORE_ADMIN_TOKEN: '' } }).http.adminToken).toBe(token);
  });

  it.each([
    ['shorter than 16 characters', 'x'.repeat(15)],
    ['longer than 512 characters', 'x'.repeat(513)],
    ['with a space', 'abcdefgh ijklmnop'],
  ])('rejects a token %s, naming http.adminToken', (_, value) => {
    const file = write('bad-token.yaml', withToken(value));
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(`${file}: http.adminToken:`);
    const viaEnv = failure(() =>
      loadConfig({ argv: [], env: { ECHOSTORE_ADMIN_TOKEN: value }, cwd: dir }),
    );
    expect(viaEnv.code).toBe('ECC_BAD_CONFIG');
    expect(viaEnv.message).toContain(
      'environment variable ECHOSTORE_ADMIN_TOKEN: http.adminToken:',
    );
    expect(viaEnv.message).not.toContain(value);
  });
});

describe('loadConfig rejects an invalid file', () => {
  const table = (extra = '') => `tables:\n  products:\n    source: ${HTTP_SOURCE}\n${extra}`;
  const cases: Array<[string, string, string]> = [
    ['a non-integer ttlMs', table('    ttlMs: 1.5\n'), 'tables.products.ttlMs'],
    ['a port above 65535', `http: { port: 70000 }\n${table()}`, 'http.port'],
    ['zero tables', 'tables: {}\n', 'tables'],
    ['no tables field', 'http: { port: 8081 }\n', 'tables'],
    [
      'an invalid table name',
      `tables:\n  Bad.Name: { source: ${HTTP_SOURCE} }\n`,
      'tables.Bad.Name',
    ],
    ['an unknown top-level field', `cache: {}\n${table()}`, 'cache'],
    ['an unknown policy field', table('    ttl: 1000\n'), 'tables.products.ttl'],
    ['a table without source', 'tables:\n  products: { ttlMs: 1000 }\n', 'tables.products.source'],
    [
      'an unknown source kind',
      'tables:\n  products: { source: { kind: ftp, url: "ftp://x/{id}" } }\n',
      'tables.products.source.kind',
    ],
    [
      'an sqlite source without query',
      'tables:\n  products: { source: { kind: sqlite, file: x.sqlite } }\n',
      'tables.products.source.query',
    ],
    [
      'an http url without {id}',
      'tables:\n  products: { source: { kind: http, url: "http://127.0.0.1/p" } }\n',
      'tables.products.source.url',
    ],
    [
      'a postgres url that is not postgres://',
      'tables:\n  products: { source: { kind: postgres, url: "mysql://h/db", query: "SELECT 1" } }\n',
      'tables.products.source.url',
    ],
    [
      'a mysql source without query',
      'tables:\n  products: { source: { kind: mysql, url: "mysql://root@h/db" } }\n',
      'tables.products.source.query',
    ],
    [
      'a postgres pool of 0',
      'tables:\n  products: { source: { kind: postgres, url: "postgres://h/db", query: "SELECT 1", poolSize: 0 } }\n',
      'tables.products.source.poolSize',
    ],
    ['a maxBatchSize of 0', table('    maxBatchSize: 0\n'), 'tables.products.maxBatchSize'],
    [
      'a field of the other source kind',
      'tables:\n  products: { source: { kind: http, url: "http://h/{id}", query: "SELECT 1" } }\n',
      'tables.products.source.query',
    ],
    [
      'an idPattern that does not compile',
      table('    idPattern: "([a-z"\n'),
      'tables.products.idPattern',
    ],
    [
      'an L1 bound below its minimum',
      table('    l1: { maxEntries: 0 }\n'),
      'tables.products.l1.maxEntries',
    ],
    [
      'a non-redis valkey url',
      `valkey: { url: "http://127.0.0.1:6379" }\n${table()}`,
      'valkey.url',
    ],
    ['an unknown log level', `log: { level: loud }\n${table()}`, 'log.level'],
    [
      'a negative bodyLimitBytes',
      `http: { bodyLimitBytes: -1 }\n${table()}`,
      'http.bodyLimitBytes',
    ],
    [
      'a negative shutdownDelayMs',
      `http: { shutdownDelayMs: -1 }\n${table()}`,
      'http.shutdownDelayMs',
    ],
    ['a warm section naming nothing', table('    warm: {}\n'), 'tables.products.warm'],
    [
      'a warm section naming two forms',
      table('    warm: { ids: ["1"], top: 5 }\n'),
      'tables.products.warm',
    ],
    [
      'a warm concurrency of 0',
      table('    warm: { ids: ["1"], concurrency: 0 }\n'),
      'tables.products.warm.concurrency',
    ],
    [
      'an unknown warm field',
      table('    warm: { ids: ["1"], every: 5 }\n'),
      'tables.products.warm.every',
    ],
    ['a list at the top level', '- tables\n', '(root)'],
    [
      'a CR LF in an http header value',
      'tables:\n  products:\n    source: { kind: http, url: "http://h/{id}", headers: { x-key: "k\\r\\nx-injected: 1" } }\n',
      'tables.products.source.headers.x-key',
    ],
    [
      'a NUL in an http header value',
      'tables:\n  products:\n    source: { kind: http, url: "http://h/{id}", headers: { x-key: "k\\0" } }\n',
      'tables.products.source.headers.x-key',
    ],
    [
      'an http header name with a newline',
      'tables:\n  products:\n    source: { kind: http, url: "http://h/{id}", headers: { "x\\nkey": k } }\n',
      'tables.products.source.headers.x\nkey',
    ],
    [
      'a zero maxBodyBytes',
      'tables:\n  products:\n    source: { kind: http, url: "http://h/{id}", maxBodyBytes: 0 }\n',
      'tables.products.source.maxBodyBytes',
    ],
    [
      'a maxBodyBytes above 1 GiB',
      'tables:\n  products:\n    source: { kind: http, url: "http://h/{id}", maxBodyBytes: 1073741825 }\n',
      'tables.products.source.maxBodyBytes',
    ],
    [
      'the table name __proto__',
      `tables:\n  __proto__: { source: ${HTTP_SOURCE} }\n`,
      'tables.__proto__',
    ],
    [
      'the table name constructor',
      `tables:\n  constructor: { source: ${HTTP_SOURCE} }\n`,
      'tables.constructor',
    ],
    [
      'the table name prototype',
      `tables:\n  prototype: { source: ${HTTP_SOURCE} }\n`,
      'tables.prototype',
    ],
    [
      'an idPattern with nested quantifiers (ReDoS)',
      table('    idPattern: "^(a+)+$"\n'),
      'tables.products.idPattern',
    ],
  ];

  it.each(cases)('rejects %s, naming the file and the field', (name, text, field) => {
    const file = write(`${name.replaceAll(/\W/g, '-')}.yaml`, text);
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(file);
    expect(err.message).toContain(`${field}:`);
    expect((err as ConfigError).field).toBe(field);
  });

  it.each([
    ['an idPattern that does not compile', '    idPattern: "([a-z"\n', 'tables.products.idPattern'],
    [
      'an idPattern with nested quantifiers',
      '    idPattern: "^(a+)+$"\n',
      'tables.products.idPattern',
    ],
  ])('puts the field of %s in ConfigError.field', (name, extra, field) => {
    const file = write(`field-${name.replaceAll(/\W/g, '-')}.yaml`, table(extra));
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).field).toBe(field);
  });

  it('rejects a YAML syntax error, naming the line', () => {
    const file = write('broken.yaml', 'tables:\n  products:\n    source: { kind: http\n');
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toMatch(
      new RegExp(`^${file.replaceAll(/[.*+?^${}()|[\]\\]/g, '\\$&')}:[34]:`),
    );
  });

  it('rejects the table name __proto__ in a JSON file', () => {
    const file = write(
      'proto.json',
      `{"tables": {"__proto__": {"source": {"kind": "http", "url": "http://h/{id}"}}}}`,
    );
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(`${file}: tables.__proto__:`);
  });

  it('accepts an http source with maxBodyBytes and header values', () => {
    const file = write(
      'http-limits.yaml',
      'tables:\n  t:\n    source: { kind: http, url: "http://h/{id}", maxBodyBytes: 1024, headers: { authorization: "Bearer abc" } }\n',
    );
    expect(loadConfig({ argv: ['--config', file], env: {} }).tables.t?.source).toEqual({
      kind: 'http',
      url: 'http://h/{id}',
      maxBodyBytes: 1024,
      headers: { authorization: 'Bearer abc' },
    });
  });

  it.each([
    [
      'an alias bomb',
      'a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n' +
        'c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n' +
        'e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n',
    ],
    ['an alias without its anchor', `tables:\n  t: *nowhere\n`],
  ])('rejects %s as ECC_BAD_CONFIG naming the file', (name, text) => {
    const file = write(`${name.replaceAll(/\W/g, '-')}.yaml`, text);
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(`${file}: invalid YAML:`);
  });

  it('rejects a JSON syntax error, naming the line and column', () => {
    const file = write('broken.json', '{\n  "tables": {\n    "p": {}\n');
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(`${file}:4:1: invalid JSON:`);
  });

  it('rejects a duplicate key in a JSON file, naming the line and column', () => {
    const file = write('duplicate.json', '{\n  "http": {},\n  "http": {}\n}\n');
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(`${file}:3:3: invalid JSON:`);
  });

  it('rejects a file that cannot be read', () => {
    const file = join(dir, 'absent.yaml');
    const err = failure(() => loadConfig({ argv: ['--config', file], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain(file);
  });

  it('rejects --config without a path', () => {
    const err = failure(() => loadConfig({ argv: ['--config'], env: {} }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toContain('--config');
  });
});

describe('table policy defaults', () => {
  it('reads every default from the schema', () => {
    expect(DEFAULT_POLICY).toEqual({
      ttlMs: 300_000,
      jitter: 0.2,
      staleMs: 60_000,
      earlyRefreshBeta: 1,
      negativeTtlMs: 30_000,
      leaseMs: 2_000,
      loadTimeoutMs: 4_000,
      waitTimeoutMs: 5_000,
      maxConcurrentLoads: 256,
      initialConcurrentLoads: 16,
      maxQueueDelayMs: 2_000,
      maxQueuedLoads: 10_000,
      maxOverdueLoads: 64,
      confirmNotFoundMs: 0,
      errorTtlMs: 1_000,
      fillEventMaxBytes: 16_384,
      maxErrorTtlMs: 30_000,
      maxWaitersPerFlight: 1_000_000,
      coalescing: 'fleet',
      batchWindowMs: 0,
      maxBatchSize: 100,
      cacheHeaders: true,
      l1: { maxEntries: 10_000, maxBytes: 64 * 1024 * 1024, ttlMs: 30_000 },
    });
  });

  it('lets resolvePolicy fill in what a table leaves out, L1 bounds one by one', () => {
    const policy = resolvePolicy({ ttlMs: 1_000, l1: { maxEntries: 5 } });
    expect(policy).toEqual({
      ...DEFAULT_POLICY,
      ttlMs: 1_000,
      idPattern: undefined,
      l1: { ...DEFAULT_POLICY.l1, maxEntries: 5 },
    });
  });

  it('refuses an initialConcurrentLoads above maxConcurrentLoads, naming the field', () => {
    expect(() =>
      resolvePolicy({ maxConcurrentLoads: 2, initialConcurrentLoads: 50 }, 'tables.t'),
    ).toThrow(
      expect.objectContaining({ code: 'ECC_BAD_CONFIG', field: 'tables.t.initialConcurrentLoads' }),
    );
    expect(
      resolvePolicy({ maxConcurrentLoads: 2, initialConcurrentLoads: 2 }).initialConcurrentLoads,
    ).toBe(2);
  });

  it('starts the load limit at maxConcurrentLoads when only it is set, below the default', () => {
    expect(resolvePolicy({ maxConcurrentLoads: 4 }).initialConcurrentLoads).toBe(4);
    expect(resolvePolicy({ maxConcurrentLoads: 64 }).initialConcurrentLoads).toBe(16);
  });

  it('names the bare field when resolvePolicy is given no path', () => {
    expect(() => resolvePolicy({ idPattern: '(' })).toThrow(
      expect.objectContaining({ code: 'ECC_BAD_CONFIG', field: 'idPattern' }),
    );
  });
});

describe('createStore table options', () => {
  const load = () => 1;
  it('takes every duration up to 2^31 - 1 ms', async () => {
    const longest = 2_147_483_647;
    const table = uniqueTable('longest');
    const store = await openStore({
      [table]: {
        load,
        ttlMs: longest,
        loadTimeoutMs: longest,
        waitTimeoutMs: longest,
        leaseMs: longest,
      },
    });
    expect(await store.table(table).get('1')).toMatchObject({ found: true, value: 1 });
  });

  it.each<[string, Partial<TableOptions>, string, string]>([
    [
      'an unknown field',
      { ttlMS: 5 } as Partial<TableOptions>,
      'tables.t.ttlMS',
      'is not a known field',
    ],
    [
      'a fractional L1 bound',
      { l1: { maxEntries: 1.5 } },
      'tables.t.l1.maxEntries',
      'must be integer',
    ],
    [
      'an idPattern with nested quantifiers',
      { idPattern: '^(a+)+$' },
      'tables.t.idPattern',
      'is not a safe regular expression: matching an id can take exponential time',
    ],
    [
      'an idPattern with overlapping alternation',
      { idPattern: '^(a|aa)+$' },
      'tables.t.idPattern',
      'is not a safe regular expression: matching an id can take exponential time',
    ],
    ...['ttlMs', 'loadTimeoutMs', 'waitTimeoutMs', 'leaseMs', 'maxQueueDelayMs'].map(
      (name): [string, Partial<TableOptions>, string, string] => [
        `${name} over 2^31 - 1 ms (the longest a Node timer waits)`,
        { [name]: 2_147_483_648 },
        `tables.t.${name}`,
        'must be <= 2147483647',
      ],
    ),
  ])('names the field of %s, as the config file would', async (_, options, field, reason) => {
    const tables = { t: { load, ...options } };
    const err = await errorOf(createStore({ valkey: valkeyUrl(), tables }));
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).field).toBe(field);
    expect(err.message).toBe(`${field}: ${reason}`);
  });
});
