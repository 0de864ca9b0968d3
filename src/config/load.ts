/**
 * Loads the service configuration: the file named by `--config` or
 * `ECHOSTORE_CONFIG` (YAML or JSON), or the built-in demo, then the
 * environment overrides; validated at start so that a bad field stops the
 * process with a message naming it.
 */
import { dirname, extname, resolve } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { Ajv } from 'ajv';
import { LineCounter, parseDocument } from 'yaml';
import { ConfigError } from '../errors.js';
import { resolvePolicy } from '../store/policy.js';
import { usesTls } from '../valkey/client.js';
import { passwordSource, tlsOptions } from '../valkey/credentials.js';
import { MAX_CONFIG_FILE_BYTES, readFileUpTo } from './bounded-read.js';
import { resolveTraceExport } from './otlp.js';
import {
  configSchema,
  type FileConfig,
  SECTIONS,
  type ServiceConfig,
  type TableConfig,
} from './schema.js';
import { schemaProblem } from './schema-error.js';

/** Inputs of {@link loadConfig}; passed in so that tests need no process state. */
export interface LoadConfigOptions {
  /** Command-line arguments (e.g. `process.argv.slice(2)`); only `--config <path>` / `--config=<path>` is read. */
  argv: string[];
  /** Environment (e.g. `process.env`). An empty variable counts as unset. */
  env: Record<string, string | undefined>;
  /** Directory relative paths are resolved against. Default `process.cwd()`. */
  cwd?: string;
}

/** Origin of a configuration that was not read from a file. */
export const BUILT_IN_DEMO = 'built-in demo';

/** The query of the built-in demo table `products`. */
export const DEMO_QUERY =
  'SELECT id, sku, name, category, price_cents, stock, description FROM products WHERE id = ?';

// No useDefaults: it would fill in the table policy defaults too (see withSectionDefaults).
// verbose: the error formatter lists a discriminator's kinds from the parent schema.
const ajv = new Ajv({ strict: true, discriminator: true, allErrors: false, verbose: true });
const validate = ajv.compile<FileConfig>(configSchema);

/** Configuration fields the environment overrides, by variable (an empty variable counts as unset). */
export const ENV_FIELDS = {
  VALKEY_URL: 'valkey.url',
  VALKEY_CLUSTER_NODES: 'valkey.cluster.nodes',
  HOST: 'http.host',
  PORT: 'http.port',
  LOG_LEVEL: 'log.level',
  ECHOSTORE_ADMIN_TOKEN: 'http.adminToken',
  ECHOSTORE_NAMESPACE: 'namespace',
} as const;

/**
 * Most alias expansions a YAML file may make: enough for any hand-written config,
 * far too few for an alias bomb ("billion laughs").
 */
const MAX_YAML_ALIAS_COUNT = 100;

/**
 * Reads, validates and completes the configuration.
 *
 * 1. The file is `--config <path>` (or `--config=<path>`) in `argv`, else
 *    `ECHOSTORE_CONFIG`; relative to `cwd`. It is parsed as YAML 1.2, of which
 *    JSON is a subset, whatever its extension. A relative `source.file` of an
 *    sqlite table, and a relative `warm.file`, are resolved against the file's directory.
 * 2. Without a file: one built-in demo table, `products`, served by the demo
 *    catalog in `<ECHOSTORE_DATA_DIR or cwd/data>/demo.sqlite` (created on first use).
 * 3. `VALKEY_URL`, `VALKEY_CLUSTER_NODES` (comma-separated `host:port`),
 *    `HOST`, `PORT`, `LOG_LEVEL`, `ECHOSTORE_ADMIN_TOKEN`, `ECHOSTORE_NAMESPACE` override the file, and
 *    are validated the same way. `VALKEY_URL` replaces the file's `cluster` or
 *    `sentinel`, `VALKEY_CLUSTER_NODES` its `url` or `sentinel`; both at once are refused.
 * 4. The trace export (`traceExport`) is resolved from `tracing` and OpenTelemetry's
 *    `OTEL_*` variables (src/config/otlp.ts).
 *
 * A relative `valkey.tls.caFile`, `certFile`, `keyFile`, `valkey.passwordFile` and
 * `valkey.sentinel.passwordFile` are resolved against the file's directory too, and
 * must be readable (PEM of their kind; a password file not empty).
 *
 * The defaults of `valkey`, `http` and `log` are filled in from the schema
 * (`configSchema`; listed in docs/configuration.md); table policy fields stay
 * as written (the store applies their defaults).
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` when the file cannot be read or parsed
 *   (with its line; an alias bomb too), fails the schema, has no table or a
 *   reserved table name, has a `valkey.url` that does not parse (scheme redis/rediss,
 *   port 1–65535, db 0–15), has a `valkey.tls` file that cannot be read or holds no PEM
 *   block of its kind, a password file that cannot be read or is empty, a password given
 *   twice or a username without one, a `valkey.tls` that the connection would not use
 *   (a `redis://` URL), has an `idPattern` that does not compile or is unsafe, has a `warm` that names not exactly one of
 *   `ids`, `file` and `top`, a trace export that is not OTLP/HTTP to an http(s) URL, or an
 *   override is invalid. The message names the file
 *   (or variable) and the field as a dotted path, e.g. `tables.products.ttlMs: must be
 *   integer`; `field` holds that path when one field is at fault.
 */
export function loadConfig(options: LoadConfigOptions): ServiceConfig {
  const cwd = options.cwd ?? process.cwd();
  const env = (name: string): string | undefined => options.env[name] || undefined;
  const path = configPath(options.argv) ?? env('ECHOSTORE_CONFIG');

  let origin: string;
  let raw: unknown;
  if (path === undefined) {
    origin = BUILT_IN_DEMO;
    raw = demoConfig(resolve(cwd, env('ECHOSTORE_DATA_DIR') ?? 'data'));
  } else {
    origin = resolve(cwd, path);
    raw = readConfigFile(origin);
  }

  checkValkeyMode(raw, origin);
  withSectionDefaults(raw);
  if (!validate(raw)) {
    const { field, reason } = schemaProblem(validate.errors);
    throw new ConfigError(`${origin}: ${field}: ${reason}`, { field });
  }
  const config = raw;
  const urlProblem = valkeyUrlProblem(config.valkey.url);
  if (urlProblem !== undefined) {
    throw new ConfigError(`${origin}: valkey.url: ${urlProblem}`, { field: 'valkey.url' });
  }
  for (const [name, table] of Object.entries(config.tables)) {
    checkPolicy(name, table, origin);
    checkWarm(name, table, origin);
    if (table.source.kind === 'sqlite' && path !== undefined) {
      table.source.file = resolve(dirname(origin), table.source.file);
    }
    if (table.warm?.file !== undefined && path !== undefined) {
      table.warm.file = resolve(dirname(origin), table.warm.file);
    }
  }

  applyEnv(config, env);
  // Whether TLS is used at all before whether its files are good: one fix, not two.
  checkTlsUsed(config.valkey, origin);
  checkValkeyFiles(config.valkey, path === undefined ? undefined : dirname(origin), origin);
  const traceExport = resolveTraceExport(config.tracing, env, origin);
  return { ...config, origin, ...(traceExport === undefined ? {} : { traceExport }) };
}

/**
 * With `valkey.url`, `valkey.tls` applies only to a `rediss://` URL: given with
 * a plain `redis://` URL (from the file or `VALKEY_URL`), the connection would
 * silently not use it. A cluster or Sentinel set uses TLS exactly when it is given.
 *
 * @throws {ConfigError} naming `valkey.tls`.
 */
function checkTlsUsed(valkey: FileConfig['valkey'], origin: string): void {
  if (valkey.tls === undefined || valkey.cluster !== undefined || valkey.sentinel !== undefined)
    return;
  if (usesTls(valkey.url ?? '')) return;
  throw new ConfigError(
    `${origin}: valkey.tls: is set, but the connection would not use it: valkey.url is a redis:// URL (plain TCP; rediss:// uses TLS); use a rediss:// URL or remove valkey.tls`,
    { field: 'valkey.tls' },
  );
}

/**
 * Fills in, in place, the defaults of `valkey`, `http` and `log` (and of `valkey.tls` when it
 * is there) from the schema, as ajv's `useDefaults` would; `tables` is left as written, its
 * policy defaults being the store's to apply. Anything that is not a mapping is left for the
 * schema to reject.
 */
function withSectionDefaults(raw: unknown): void {
  if (!isMapping(raw)) return;
  for (const section of SECTIONS) {
    const value = raw[section] === undefined ? {} : raw[section];
    if (isMapping(value)) raw[section] = Value.Default(configSchema.properties[section], value);
  }
}

/**
 * A file names at most one of `valkey.url`, `valkey.cluster` and `valkey.sentinel`
 * (checked before the defaults fill in `url`).
 *
 * @throws {ConfigError} naming the second of them.
 */
function checkValkeyMode(raw: unknown, origin: string): void {
  const valkey = isMapping(raw) && isMapping(raw.valkey) ? raw.valkey : {};
  const [first, second] = ['url', 'cluster', 'sentinel'].filter((k) => valkey[k] !== undefined);
  if (second !== undefined) {
    throw new ConfigError(
      `${origin}: valkey.${second}: cannot be used with valkey.${first} (name one of url, cluster, sentinel)`,
      { field: `valkey.${second}` },
    );
  }
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The command line of `serve` or `check-config`: the last `--config <path>` /
 * `--config=<path>`, or what is wrong with it (an argument other than those, a
 * `--config` without a path).
 */
function readConfigArgs(argv: readonly string[]): { path?: string; usage?: string } {
  let path: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--config') {
      // `--config --x`: the next option, not a path (`--config=--x` names a file "--x").
      path = argv[++i];
      if (path?.startsWith('--')) path = undefined;
    } else if (arg.startsWith('--config=')) path = arg.slice('--config='.length);
    else {
      return {
        usage: `unknown argument "${arg.slice(0, 100)}": the only one is --config <path> (or set ECHOSTORE_CONFIG)`,
      };
    }
    if (path === undefined || path === '') return { usage: '--config: needs a file path' };
  }
  return { path };
}

/**
 * What is wrong with the command line of `serve` or `check-config`, if
 * anything: a usage error (exit 64), not an invalid configuration (exit 2):
 * docs/cli.md.
 *
 * @returns the message, or `undefined` when the arguments are well formed.
 */
export function configArgsUsageError(argv: readonly string[]): string | undefined {
  return readConfigArgs(argv).usage;
}

/**
 * The value of the last `--config <path>` / `--config=<path>`, if any.
 *
 * @throws {ConfigError} for any other argument (a mistyped `--confg`, a bare
 *   path): the service must not start on the built-in demo by mistake.
 */
function configPath(argv: string[]): string | undefined {
  const { path, usage } = readConfigArgs(argv);
  if (usage !== undefined) throw new ConfigError(usage);
  return path;
}

function demoConfig(dataDir: string): unknown {
  return {
    // Its own namespace: a library store on the same Valkey never reads the demo's rows.
    namespace: 'demo',
    tables: {
      products: {
        source: {
          kind: 'sqlite',
          file: resolve(dataDir, 'demo.sqlite'),
          query: DEMO_QUERY,
          seed: 'demo',
          // Purge "everything of a category": POST /v1/tables/products/purge {"tags": ["kitchen"]}.
          tagsColumn: 'category',
        },
        idPattern: '^[1-9][0-9]{0,9}$',
      },
    },
  };
}

/**
 * The parsed file. YAML and JSON alike go through the YAML parser (JSON is YAML 1.2), so
 * that a syntax error names its line and column either way; a `.json` file is therefore
 * also allowed what YAML allows in flow style (comments, trailing commas), and a duplicate
 * key is an error in both.
 */
function readConfigFile(file: string): unknown {
  let text: string;
  try {
    text = readFileUpTo(file, MAX_CONFIG_FILE_BYTES);
  } catch (err) {
    throw new ConfigError(`${file}: cannot read the file: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const invalid = extname(file).toLowerCase() === '.json' ? 'invalid JSON' : 'invalid YAML';
  const lineCounter = new LineCounter();
  try {
    const doc = parseDocument(text, { lineCounter, prettyErrors: false });
    const error = doc.errors[0];
    if (error !== undefined) {
      const { line, col } = lineCounter.linePos(error.pos[0]);
      throw new ConfigError(`${file}:${line}:${col}: ${invalid}: ${error.message}`, {
        cause: error,
      });
    }
    return doc.toJS({ maxAliasCount: MAX_YAML_ALIAS_COUNT });
  } catch (err) {
    // The yaml library also throws: an alias bomb ("Excessive alias count"), an unresolvable alias…
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`${file}: ${invalid}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * What is wrong with a `valkey.url` that passed the schema (`^rediss?://`), or
 * `undefined`. Never quotes the URL: it may hold a password.
 */
function valkeyUrlProblem(url: string): string | undefined {
  const expected = 'redis://[user:password@]host[:port][/db] or rediss://…';
  const authority = /^[a-z]+:\/\/([^/?#]*)/i.exec(url)?.[1] ?? '';
  const port = /:([0-9]+)$/.exec(authority.slice(authority.lastIndexOf('@') + 1))?.[1];
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65_535)) {
    return 'the port must be 1-65535';
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `is not a valid URL (expected ${expected})`;
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    return `must be a redis:// or rediss:// URL (expected ${expected})`;
  }
  // `redis://` alone parses, and the client would quietly use 127.0.0.1:6379.
  if (parsed.hostname === '') return `names no host (expected ${expected})`;
  if (!/^(?:\/(?:[0-9]|1[0-5])?)?$/.test(parsed.pathname)) {
    return 'the database index (the path) must be 0-15';
  }
  return undefined;
}

/**
 * Resolves the relative files of `valkey` (`tls.caFile`, `tls.certFile`,
 * `tls.keyFile`, `passwordFile`, `sentinel.passwordFile`) against `dir`, and
 * reads each once, as the connection will: so an unreadable file, a PEM file
 * of the wrong kind, a password given twice or a username without one refuse
 * the start, naming the field. A password given both in `valkey.url` and as
 * `valkey.password`/`passwordFile` is refused too (which would win is not obvious).
 */
function checkValkeyFiles(valkey: FileConfig['valkey'], dir: string | undefined, origin: string) {
  const at = (file: string | undefined) =>
    file === undefined || dir === undefined ? file : resolve(dir, file);
  const { tls, sentinel } = valkey;
  if (tls !== undefined) {
    for (const key of ['caFile', 'certFile', 'keyFile'] as const) {
      if (tls[key] !== undefined) tls[key] = at(tls[key]);
    }
  }
  if (valkey.passwordFile !== undefined) valkey.passwordFile = at(valkey.passwordFile);
  if (sentinel?.passwordFile !== undefined) sentinel.passwordFile = at(sentinel.passwordFile);
  try {
    if (tls !== undefined) tlsOptions(tls);
    passwordSource(valkey, 'valkey');
    if (sentinel !== undefined) passwordSource(sentinel, 'valkey.sentinel');
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    // These messages begin with the field (`valkey.tls.caFile: …`) and quote no password.
    throw new ConfigError(`${origin}: ${err.message}`, { field: err.field, cause: err });
  }
  const inUrl =
    valkey.cluster === undefined && valkey.sentinel === undefined && urlHasPassword(valkey.url);
  if (inUrl && (valkey.password !== undefined || valkey.passwordFile !== undefined)) {
    const field = valkey.password === undefined ? 'valkey.passwordFile' : 'valkey.password';
    throw new ConfigError(
      `${origin}: ${field}: cannot be used with a password in valkey.url (give it in one place)`,
      { field },
    );
  }
}

/** Whether a Valkey URL carries a password (`redis://[user]:password@…`). */
function urlHasPassword(url: string): boolean {
  try {
    return new URL(url).password !== '';
  } catch {
    return false;
  }
}

function checkPolicy(name: string, table: TableConfig, origin: string): void {
  const { source: _, ...policy } = table;
  try {
    resolvePolicy(policy, `tables.${name}`);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    throw new ConfigError(`${origin}: ${err.message}`, { field: err.field, cause: err });
  }
}

/** `warm` names exactly one of `ids`, `file` and `top`. */
function checkWarm(name: string, table: TableConfig, origin: string): void {
  if (table.warm === undefined) return;
  const given = (['ids', 'file', 'top'] as const).filter((k) => table.warm?.[k] !== undefined);
  if (given.length !== 1) {
    const field = `tables.${name}.warm`;
    const problem = given.length === 0 ? 'names none' : `names ${given.join(' and ')}`;
    throw new ConfigError(
      `${origin}: ${field}: must name exactly one of ids, file, top (it ${problem})`,
      {
        field,
      },
    );
  }
}

function applyEnv(config: FileConfig, env: (name: string) => string | undefined): void {
  const port = env('PORT');
  if (port !== undefined) {
    if (!/^[0-9]{1,5}$/.test(port) || Number(port) > 65_535) {
      throw new ConfigError(
        `environment variable PORT: must be an integer 0-65535 (got "${port}")`,
        { field: 'http.port' },
      );
    }
    config.http.port = Number(port);
  }
  const url = env('VALKEY_URL');
  const nodes = env('VALKEY_CLUSTER_NODES');
  if (url !== undefined && nodes !== undefined) {
    throw new ConfigError(
      'environment variables VALKEY_URL and VALKEY_CLUSTER_NODES: valkey.cluster: set only one',
      { field: 'valkey.cluster' },
    );
  }
  if (url !== undefined) {
    config.valkey.url = url;
    delete config.valkey.cluster;
    delete config.valkey.sentinel;
  }
  if (nodes !== undefined) {
    config.valkey.cluster = {
      nodes: nodes.split(',').flatMap((n) => (n.trim() === '' ? [] : [n.trim()])),
    };
    delete config.valkey.sentinel;
  }
  const host = env('HOST');
  if (host !== undefined) config.http.host = host;
  const level = env('LOG_LEVEL');
  if (level !== undefined) config.log.level = level as FileConfig['log']['level'];
  const adminToken = env('ECHOSTORE_ADMIN_TOKEN');
  if (adminToken !== undefined) config.http.adminToken = adminToken;
  const namespace = env('ECHOSTORE_NAMESPACE');
  if (namespace !== undefined) config.namespace = namespace;

  if (!validate(config)) {
    const { field, reason } = schemaProblem(validate.errors);
    const variable = Object.entries(ENV_FIELDS).find(([, f]) => field.startsWith(f))?.[0] ?? '?';
    throw new ConfigError(`environment variable ${variable}: ${field}: ${reason}`, { field });
  }
  const urlProblem = url === undefined ? undefined : valkeyUrlProblem(url);
  if (urlProblem !== undefined) {
    throw new ConfigError(`environment variable VALKEY_URL: valkey.url: ${urlProblem}`, {
      field: 'valkey.url',
    });
  }
}
