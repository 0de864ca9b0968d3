/**
 * The service configuration: its TypeScript shape, the JSON schema (ajv) a
 * configuration file is validated against, and its defaults.
 */
import type { SourceConfig } from '../sources/index.js';
import { policySchemaProperties, type TablePolicyInput } from '../store/policy.js';
import type { ValkeyTlsOptions } from '../valkey.js';

/** pino levels accepted by `log.level` and `LOG_LEVEL`. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** A pino level, or `silent`. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** One table: where its items come from, and its freshness policy (every field optional). */
export type TableConfig = { source: SourceConfig } & TablePolicyInput;

/** The validated configuration, with every default applied. Durations are milliseconds. */
export interface ServiceConfig {
  valkey: {
    /** `redis://[user:password@]host[:port][/db]` or `rediss://…`; port 1–65535, db 0–15. Default `redis://127.0.0.1:6379`. */
    url: string;
    /** A Valkey command not answered within this fails. Default 1,000. */
    commandTimeoutMs: number;
    /** A connection attempt not established within this fails; also how long start-up waits. Default 2,000. */
    connectTimeoutMs: number;
    /**
     * TLS settings, used only with a `rediss://` URL. No default (unset: Node's
     * built-in roots, verified, SNI from the URL's host); when present,
     * `rejectUnauthorized` defaults to true and a relative `caFile` is resolved
     * against the config file's directory.
     */
    tls?: ValkeyTlsOptions;
  };
  http: {
    /** Listen address. Default `127.0.0.1`. */
    host: string;
    /** Listen port, 0–65535 (0: any free port). Default 8080. */
    port: number;
    /** Largest PUT body, in bytes. Default 1,048,576. */
    bodyLimitBytes: number;
    /**
     * Bearer token required by PUT, DELETE and warm-up: 16–512 visible ASCII characters.
     * Also `ECHOSTORE_ADMIN_TOKEN`, which overrides the file. No default (unset: no token).
     */
    adminToken?: string;
  };
  log: {
    /** Default `info`. */
    level: LogLevel;
  };
  /** Tables by name (`[a-z0-9_-]{1,64}`, not one of {@link RESERVED_TABLE_NAMES}), at least one. */
  tables: Record<string, TableConfig>;
  /** Where the config came from: the file path, or 'built-in demo'. */
  origin: string;
}

/** Default of `valkey.url`. */
export const DEFAULT_VALKEY_URL = 'redis://127.0.0.1:6379';

/**
 * Names a table may not have: as keys of a plain object they reach `Object.prototype`
 * (`tables.__proto__ = …` replaces the prototype instead of adding a table).
 */
export const RESERVED_TABLE_NAMES = ['__proto__', 'constructor', 'prototype'] as const;

/** A header value without CR, LF or NUL (they would split or truncate the request). */
export const HEADER_VALUE_PATTERN = '^[^\\r\\n\\u0000]*$';

/** `http.adminToken`: visible ASCII (it travels in an `authorization` header). */
export const ADMIN_TOKEN_PATTERN = '^[\\x21-\\x7e]*$';

/** What a value must be to match each `pattern` of the schema, for error messages. */
export const PATTERN_MEANINGS: ReadonlyMap<string, string> = new Map([
  [HEADER_VALUE_PATTERN, 'must not contain CR, LF or NUL'],
  [ADMIN_TOKEN_PATTERN, 'must be visible ASCII characters (no spaces or control characters)'],
]);

const ms = { type: 'integer', minimum: 1, maximum: 3_600_000 } as const;

const sqliteSourceSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['kind', 'file', 'query'],
  properties: {
    kind: { const: 'sqlite' },
    file: { type: 'string', minLength: 1 },
    query: { type: 'string', minLength: 1 },
    seed: { enum: ['demo'] },
  },
} as const;

const httpSourceSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['kind', 'url'],
  properties: {
    kind: { const: 'http' },
    url: { type: 'string', pattern: '^https?://.*\\{id\\}' },
    timeoutMs: ms,
    headers: {
      type: 'object',
      propertyNames: { pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$" },
      additionalProperties: { type: 'string', pattern: HEADER_VALUE_PATTERN },
    },
    maxBodyBytes: { type: 'integer', minimum: 1, maximum: 1024 * 1024 * 1024 },
  },
} as const;

/**
 * JSON schema of a configuration file (after YAML/JSON parsing). Used with
 * ajv `useDefaults`, so validating also fills in the defaults of `valkey`,
 * `http` and `log`; table policy defaults are applied later by `resolvePolicy`.
 */
export const configSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['tables'],
  properties: {
    valkey: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        url: { type: 'string', pattern: '^rediss?://', default: DEFAULT_VALKEY_URL },
        commandTimeoutMs: { ...ms, default: 1_000 },
        connectTimeoutMs: { ...ms, default: 2_000 },
        tls: {
          type: 'object',
          additionalProperties: false,
          properties: {
            caFile: { type: 'string', minLength: 1 },
            rejectUnauthorized: { type: 'boolean', default: true },
            servername: { type: 'string', minLength: 1 },
          },
        },
      },
    },
    http: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        host: { type: 'string', minLength: 1, default: '127.0.0.1' },
        port: { type: 'integer', minimum: 0, maximum: 65_535, default: 8080 },
        bodyLimitBytes: {
          type: 'integer',
          minimum: 1,
          maximum: 1024 * 1024 * 1024,
          default: 1024 * 1024,
        },
        adminToken: {
          type: 'string',
          minLength: 16,
          maxLength: 512,
          pattern: ADMIN_TOKEN_PATTERN,
        },
      },
    },
    log: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: { level: { enum: LOG_LEVELS, default: 'info' } },
    },
    tables: {
      type: 'object',
      minProperties: 1,
      propertyNames: { pattern: '^[a-z0-9_-]{1,64}$', not: { enum: RESERVED_TABLE_NAMES } },
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['source'],
        properties: {
          source: {
            type: 'object',
            discriminator: { propertyName: 'kind' },
            required: ['kind'],
            properties: { kind: { enum: ['sqlite', 'http'] } },
            oneOf: [sqliteSourceSchema, httpSourceSchema],
          },
          ...policySchemaProperties,
        },
      },
    },
  },
} as const;
