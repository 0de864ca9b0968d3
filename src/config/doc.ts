/**
 * Renders `docs/configuration.md` from the configuration schema, so that the
 * reference cannot drift from what the loader accepts: every field with its
 * type, default, bounds and description, one table per section.
 */
import type { TSchema } from '@sinclair/typebox';
import { TablePolicySchema } from '../store/policy.js';
import { ENV_FIELDS } from './load.js';
import { OTEL_ENV } from './otlp.js';
import {
  configSchema,
  HttpSchema,
  LogSchema,
  NamespaceSchema,
  PATTERN_MEANINGS,
  SOURCE_SCHEMAS,
  TracingSchema,
  ValkeySchema,
  WarmSchema,
} from './schema.js';

/** Where {@link renderConfigDoc}'s output is committed, relative to the repository root. */
export const CONFIG_DOC_PATH = 'docs/configuration.md';

/** The JSON-schema keywords this renderer reads. */
interface FieldSchema {
  type?: string;
  enum?: readonly unknown[];
  const?: unknown;
  default?: unknown;
  description?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minProperties?: number;
  pattern?: string;
  propertyNames?: { pattern?: string };
  properties?: Record<string, FieldSchema>;
  additionalProperties?: boolean | FieldSchema;
  required?: readonly string[];
}

/**
 * The Markdown reference of the configuration file: how it is found and parsed, the
 * environment overrides, then a table per section (`valkey`, `http`, `log`, a table's policy,
 * each source kind) listing every field's type, default (or "required"), bounds and
 * description. Deterministic: the same schema always renders the same text.
 */
export function renderConfigDoc(): string {
  const tables = configSchema.properties.tables as unknown as FieldSchema;
  const overrides = Object.entries(ENV_FIELDS).map(([variable, field]) => [
    `\`${variable}\``,
    `\`${field}\``,
  ]);
  const sources = Object.entries(SOURCE_SCHEMAS).flatMap(([kind, schema]) => [
    `### \`tables.<name>.source\` of kind \`${kind}\``,
    '',
    describe(schema),
    '',
    ...fieldTable(schema),
    '',
  ]);
  return [
    '# Configuration',
    '',
    '<!-- Generated from src/config/schema.ts and src/store/policy.ts by `npm run docs:config`; edit those, not this file. -->',
    '',
    'One file, named by `--config <path>` (or `--config=<path>`) or else by `ECHOSTORE_CONFIG`, relative to the working directory.',
    'It is parsed as YAML 1.2, of which JSON is a subset, whatever its extension, so a syntax error names its line and column. It may hold at most 1 MiB: a larger file, or one that never ends (`/dev/zero`), is refused while it is read.',
    'Without a file the service serves the built-in demo table `products` (SQLite, ids `^[1-9][0-9]{0,9}$`).',
    'The whole configuration is validated at start: a bad field stops the process with exit code 2 and a message naming the file and the field as a dotted path, e.g. `tables.products.ttlMs: must be integer`.',
    '',
    'Durations are milliseconds and sizes bytes. A field with no default and not marked required may be left out.',
    '',
    '## Environment overrides',
    '',
    'Each variable, when set and not empty, replaces the field, and is validated the same way.',
    '',
    ...table(['Variable', 'Field'], overrides),
    '',
    '## `namespace`',
    '',
    `A string, \`${(NamespaceSchema as FieldSchema).pattern}\`, top level. ${describe(NamespaceSchema)}`,
    '',
    section('valkey', ValkeySchema, 'How the service reaches Valkey (or Redis).'),
    '### A managed cluster, end to end',
    '',
    "A Valkey/Redis Cluster with TLS in transit and an ACL user, such as ElastiCache for Valkey with cluster mode on: the configuration endpoint as the seed, TLS to every node, the ACL user on every node, its password from a mounted secret read again on every reconnect (so it rotates without a restart; see operations.md#a-managed-cluster-elasticache-style-tls-an-acl-user-a-rotated-password). The files are relative to the config file; `caFile` only for a private CA (a managed service chains to Node's built-in roots), `certFile`/`keyFile` only for nodes that require client certificates.",
    '',
    '```yaml',
    MANAGED_CLUSTER_EXAMPLE.trimEnd(),
    '```',
    '',
    section('http', HttpSchema, 'The HTTP API.'),
    section('log', LogSchema, 'The pino logger.'),
    section('tracing', TracingSchema, describe(TracingSchema as unknown as FieldSchema)),
    `OpenTelemetry's variables that decide the export, each overriding the file when set and not empty: ${OTEL_ENV.map((v) => `\`${v}\``).join(', ')} (see each field above; operations.md#traces).`,
    '',
    '## `tables`',
    '',
    `${describe(tables)} Each table has a \`source\` (required; below, by kind), the policy fields below, all optional, and optionally a \`warm\` section.`,
    '',
    '### `tables.<name>`: the policy',
    '',
    'Checked beyond the schema: `idPattern` must compile and be safe.',
    '',
    ...fieldTable(TablePolicySchema),
    '',
    '### `tables.<name>.warm`: warm-up at start',
    '',
    describe(WarmSchema),
    '',
    ...fieldTable(WarmSchema),
    '',
    ...sources,
  ].join('\n');
}

/**
 * The managed-cluster example of the generated doc (`valkey` and one table); `test/config.test.ts`
 * loads it, so it stays valid.
 */
export const MANAGED_CLUSTER_EXAMPLE = `valkey:
  cluster:
    nodes: ["clustercfg.cache.abc123.use1.cache.amazonaws.com:6379"]
  tls:
    caFile: valkey-ca.pem
    certFile: client.pem
    keyFile: client.key
  username: echostore
  passwordFile: secrets/valkey-password
  commandTimeoutMs: 500
tables:
  products:
    source: { kind: http, url: "http://catalog.internal/products/{id}" }
`;

function section(name: string, schema: TSchema, intro: string): string {
  return [`## \`${name}\``, '', intro, '', ...fieldTable(schema, name), ''].join('\n');
}

/** A Markdown table of the fields of an object schema, nested objects flattened (`tls.caFile`). */
function fieldTable(schema: TSchema, section?: string): string[] {
  const header = ['Field', 'Type', 'Default', 'Allowed', 'Description'];
  return table(header, rows(schema as unknown as FieldSchema, '', section));
}

function rows(schema: FieldSchema, prefix: string, section: string | undefined): string[][] {
  const required = new Set(schema.required ?? []);
  return Object.entries(schema.properties ?? {}).flatMap(([key, field]) => {
    const name = prefix + key;
    const override = Object.entries(ENV_FIELDS).find(([, f]) => f === `${section}.${name}`)?.[0];
    const description = describe(field) + (override ? ` Overridden by \`${override}\`.` : '');
    const fallback =
      field.default !== undefined
        ? value(key, field.default)
        : required.has(key)
          ? 'required'
          : '—';
    const row = [`\`${name}\``, typeOf(field), fallback, bounds(key, field), description];
    return field.properties === undefined ? [row] : [row, ...rows(field, `${name}.`, section)];
  });
}

/**
 * A Markdown table with its columns padded to one width, as the formatter (Biome) lays it
 * out, so that the generated file passes `npm run lint` unchanged. `|` in a cell is escaped:
 * GitHub ends a cell at any unescaped `|`, even inside code.
 */
function table(header: string[], body: string[][]): string[] {
  const cells = [header, ...body].map((row) => row.map((text) => text.replaceAll('|', '\\|')));
  const widths = header.map((_, i) => Math.max(3, ...cells.map((row) => (row[i] ?? '').length)));
  const line = (row: string[]) =>
    `| ${widths.map((w, i) => (row[i] ?? '').padEnd(w)).join(' | ')} |`;
  const [head = [], ...rest] = cells;
  return [line(head), line(widths.map((w) => '-'.repeat(w))), ...rest.map(line)];
}

function describe(schema: FieldSchema | TSchema): string {
  return (schema as FieldSchema).description ?? '';
}

function typeOf(field: FieldSchema): string {
  if (field.const !== undefined) return `\`${String(field.const)}\``;
  if (field.enum !== undefined) return field.enum.map((v) => `\`${String(v)}\``).join(' | ');
  if (field.type === 'object' && typeof field.additionalProperties === 'object') {
    return `map of ${typeOf(field.additionalProperties)}`;
  }
  return field.type ?? 'any';
}

function bounds(key: string, field: FieldSchema): string {
  const parts: string[] = [];
  const { minimum, maximum, minLength, maxLength } = field;
  if (minimum !== undefined && maximum !== undefined) {
    parts.push(`${value(key, minimum)} – ${value(key, maximum)}`);
  } else if (minimum !== undefined) {
    parts.push(`≥ ${value(key, minimum)}`);
  }
  if (minLength !== undefined && maxLength !== undefined) {
    parts.push(`${minLength}–${maxLength} characters`);
  } else if (minLength === 1) {
    parts.push('not empty');
  }
  if (field.pattern !== undefined) parts.push(patternText(field.pattern));
  if (field.propertyNames?.pattern !== undefined) {
    parts.push(`names match ${code(field.propertyNames.pattern)}`);
  }
  if (typeof field.additionalProperties === 'object') {
    const values = bounds(key, field.additionalProperties);
    if (values !== '') parts.push(`values: ${values}`);
  }
  return parts.join('; ');
}

function patternText(pattern: string): string {
  const meaning = PATTERN_MEANINGS.get(pattern);
  return meaning === undefined ? `matches ${code(pattern)}` : meaning;
}

const DURATION_UNITS: Array<[string, number]> = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['min', 60_000],
  ['s', 1000],
];
const SIZE_UNITS: Array<[string, number]> = [
  ['GiB', 1024 ** 3],
  ['MiB', 1024 ** 2],
  ['KiB', 1024],
];

/** `v` as written in the file, with the duration or size it means for an `…Ms` / `…Bytes` field. */
function value(key: string, v: unknown): string {
  const written = `\`${typeof v === 'string' ? v : JSON.stringify(v)}\``;
  if (typeof v !== 'number' || v === 0) return written;
  const units = key.endsWith('Ms') ? DURATION_UNITS : key.endsWith('Bytes') ? SIZE_UNITS : [];
  const unit = units.find(([, size]) => v >= size && v % size === 0);
  return unit === undefined ? written : `${written} (${v / unit[1]} ${unit[0]})`;
}

/** `text` as inline code, fenced by two backticks when it holds one. */
function code(text: string): string {
  return text.includes('`') ? `\`\`${text}\`\`` : `\`${text}\``;
}
