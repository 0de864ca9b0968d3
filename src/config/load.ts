/**
 * Loads the service configuration: the file named by `--config` or
 * `ECHOSTORE_CONFIG` (YAML or JSON), or the built-in demo, then the
 * environment overrides; validated at start so that a bad field stops the
 * process with a message naming it.
 */
import { readFileSync } from 'node:fs';
import { dirname, extname, resolve } from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { LineCounter, parseDocument } from 'yaml';
import { ConfigError } from '../errors.js';
import { resolvePolicy } from '../store/policy.js';
import { configSchema, type ServiceConfig, type TableConfig } from './schema.js';

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

type FileConfig = Omit<ServiceConfig, 'origin'>;

const ajv = new Ajv({ strict: true, useDefaults: true, discriminator: true, allErrors: false });
const validate = ajv.compile<FileConfig>(configSchema);

/** Configuration fields the environment may override, by variable. */
const ENV_FIELDS = { VALKEY_URL: 'valkey.url', HOST: 'http.host', LOG_LEVEL: 'log.level' } as const;

/**
 * Reads, validates and completes the configuration.
 *
 * 1. The file is `--config <path>` (or `--config=<path>`) in `argv`, else
 *    `ECHOSTORE_CONFIG`; relative to `cwd`. `.json` is parsed as JSON,
 *    anything else as YAML (which accepts JSON). A relative `source.file` of an
 *    sqlite table is resolved against the file's directory.
 * 2. Without a file: one built-in demo table, `products`, served by the demo
 *    catalog in `<ECHOSTORE_DATA_DIR or cwd/data>/demo.sqlite` (created on first use).
 * 3. `VALKEY_URL`, `HOST`, `PORT`, `LOG_LEVEL` override the file, and are
 *    validated the same way.
 *
 * Defaults: `valkey.url` `redis://127.0.0.1:6379`, `valkey.commandTimeoutMs`
 * 1,000, `valkey.connectTimeoutMs` 2,000, `http.host` `127.0.0.1`, `http.port`
 * 8080, `http.bodyLimitBytes` 1 MiB, `log.level` `info`; table policy fields
 * stay as written (the store applies their defaults).
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` when the file cannot be read or parsed
 *   (with its line), fails the schema, has no table, breaks a cross-field policy
 *   rule (`leaseMs > loadTimeoutMs`, `idPattern` compiles), or an override is
 *   invalid. The message names the file (or variable) and the field as a dotted
 *   path, e.g. `tables.products.ttlMs: must be integer`.
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

  if (!validate(raw)) throw new ConfigError(`${origin}: ${describe(validate.errors)}`);
  const config = raw;
  for (const [name, table] of Object.entries(config.tables)) {
    checkPolicy(name, table, origin);
    if (table.source.kind === 'sqlite' && path !== undefined) {
      table.source.file = resolve(dirname(origin), table.source.file);
    }
  }

  applyEnv(config, env);
  return { ...config, origin };
}

/** The value of the last `--config <path>` / `--config=<path>`, if any. */
function configPath(argv: string[]): string | undefined {
  let path: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--config') {
      path = argv[++i];
      if (path === undefined || path === '') throw new ConfigError('--config: needs a file path');
    } else if (arg.startsWith('--config=')) {
      path = arg.slice('--config='.length);
      if (path === '') throw new ConfigError('--config: needs a file path');
    }
  }
  return path;
}

function demoConfig(dataDir: string): unknown {
  return {
    tables: {
      products: {
        source: {
          kind: 'sqlite',
          file: resolve(dataDir, 'demo.sqlite'),
          query: DEMO_QUERY,
          seed: 'demo',
        },
        idPattern: '^[1-9][0-9]{0,9}$',
      },
    },
  };
}

function readConfigFile(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`${file}: cannot read the file: ${(err as Error).message}`, {
      cause: err,
    });
  }
  if (extname(file).toLowerCase() === '.json') {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new ConfigError(`${file}:${jsonErrorLine(text, err as Error)}`, { cause: err });
    }
  }
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false });
  const error = doc.errors[0];
  if (error !== undefined) {
    const { line, col } = lineCounter.linePos(error.pos[0]);
    const at = `${line}:${col}:`;
    throw new ConfigError(`${file}:${at} invalid YAML: ${error.message}`, { cause: error });
  }
  return doc.toJS();
}

/** `<line>:<col>: invalid JSON: <reason>`, from the `position N` V8 puts in its message. */
function jsonErrorLine(text: string, err: Error): string {
  const position = /at position (\d+)/.exec(err.message)?.[1];
  if (position === undefined) return ` invalid JSON: ${err.message}`;
  const before = text.slice(0, Number(position)).split('\n');
  const col = (before.at(-1)?.length ?? 0) + 1;
  return `${before.length}:${col}: invalid JSON: ${err.message}`;
}

function checkPolicy(name: string, table: TableConfig, origin: string): void {
  const { source: _, ...policy } = table;
  try {
    resolvePolicy(policy);
  } catch (err) {
    // resolvePolicy's messages begin with the field they concern.
    const { message } = err as Error;
    const field = /^\w+/.exec(message)?.[0];
    const at = field === undefined ? `tables.${name}` : `tables.${name}.${field}`;
    throw new ConfigError(`${origin}: ${at}: ${message}`, { cause: err });
  }
}

function applyEnv(config: FileConfig, env: (name: string) => string | undefined): void {
  const port = env('PORT');
  if (port !== undefined) {
    if (!/^[0-9]{1,5}$/.test(port) || Number(port) > 65_535) {
      throw new ConfigError(
        `environment variable PORT: must be an integer 0-65535 (got "${port}")`,
      );
    }
    config.http.port = Number(port);
  }
  const url = env('VALKEY_URL');
  if (url !== undefined) config.valkey.url = url;
  const host = env('HOST');
  if (host !== undefined) config.http.host = host;
  const level = env('LOG_LEVEL');
  if (level !== undefined) config.log.level = level as FileConfig['log']['level'];

  if (!validate(config)) {
    const problem = describe(validate.errors);
    const variable = Object.entries(ENV_FIELDS).find(([, field]) =>
      problem.startsWith(`${field}:`),
    );
    throw new ConfigError(`environment variable ${variable?.[0] ?? '?'}: ${problem}`);
  }
}

/** `<dotted.path>: <what is wrong>`, for the first schema error. */
function describe(errors: ErrorObject[] | null | undefined): string {
  const error = errors?.[0];
  if (error === undefined) return '(root): invalid';
  const path = error.instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'));
  const at = (...more: string[]) => [...path, ...more].join('.') || '(root)';
  const { params } = error;
  if (error.propertyName !== undefined) {
    return `${at(error.propertyName)}: is not a valid name (must match ${params.pattern})`;
  }
  switch (error.keyword) {
    case 'required':
      if (path.length === 0 && params.missingProperty === 'tables') {
        return 'tables: must have at least one table';
      }
      return `${at(params.missingProperty)}: is required`;
    case 'minProperties':
      return path.join('.') === 'tables'
        ? 'tables: must have at least one table'
        : `${at()}: ${error.message}`;
    case 'additionalProperties':
      return `${at(params.additionalProperty)}: is not a known field`;
    case 'enum':
      return `${at()}: must be one of ${params.allowedValues.join(', ')}`;
    case 'discriminator':
      return `${at(params.tag)}: must be one of sqlite, http`;
    case 'type':
      if (path.length === 0) return '(root): must be a mapping of fields (YAML object)';
      return `${at()}: ${error.message}`;
    default:
      return `${at()}: ${error.message}`;
  }
}
