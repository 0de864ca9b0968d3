/**
 * The service configuration file: its JSON schema (TypeBox, validated by ajv)
 * with each field's description, bounds and default, and the TypeScript types
 * derived from it. `docs/configuration.md` is generated from this schema.
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { DEFAULT_HTTP_TIMEOUT_MS, DEFAULT_MAX_BODY_BYTES } from '../sources/http.js';
import {
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_ID_COLUMN,
  DEFAULT_POOL_SIZE,
} from '../sources/sql.js';
import { TablePolicySchema } from '../store/policy.js';
import { HOST_PORT_PATTERN } from '../valkey/topology.js';

/** pino levels accepted by `log.level` and `LOG_LEVEL`. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** A pino level, or `silent`. */
export type LogLevel = (typeof LOG_LEVELS)[number];

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
  [HOST_PORT_PATTERN, 'must be host:port (or [v6 address]:port)'],
]);

const GIB = 1024 * 1024 * 1024;

/** A duration in milliseconds, 1 ms to 1 hour. */
function ms(description: string, fallback: number) {
  return Type.Integer({ minimum: 1, maximum: 3_600_000, default: fallback, description });
}

/** One of `values`, as a JSON-schema `enum` (ajv then names the allowed values). */
function stringEnum<const T extends readonly string[]>(values: T, options: object) {
  return Type.Unsafe<T[number]>({ ...options, enum: values });
}

/** A map of string keys (each matching `propertyNames`) to values of `value`. */
function map<T extends TSchema>(value: T, options: object) {
  return Type.Unsafe<Record<string, Static<T>>>({
    ...options,
    type: 'object',
    additionalProperties: value,
  });
}

/** `source` of a table whose items are rows of an SQLite file. */
export const SqliteSourceSchema = Type.Object(
  {
    kind: Type.Literal('sqlite', { description: 'Selects this kind of source.' }),
    file: Type.String({
      minLength: 1,
      description:
        "Path of the SQLite file, relative to the config file's directory. Opened read-only; it must exist unless `seed` creates it.",
    }),
    query: Type.String({
      minLength: 1,
      description:
        'A query returning rows that takes exactly one parameter, the id: `?`, or the named `@id` / `:id` / `$id`. The first row is the item; no row is "not found".',
    }),
    seed: Type.Optional(
      stringEnum(['demo'], {
        description:
          '`demo`: create the demo catalog (10,000 products) in `file` first, when it has no `products` table.',
      }),
    ),
    tagsColumn: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64,
        description:
          "A column of the query's rows holding the row's purge tags: text of tags separated by spaces or commas, an array of tags, or a number; `null` for none; a row without the column fails its load. The column stays in the value. At most 64 tags of 1–128 visible ASCII characters but `|`, else the load fails (`ECC_BAD_ROW_TAGS`).",
      }),
    ),
    idsQuery: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          "A query listing ids, most wanted first, for the table's `warm.top`: it takes exactly one parameter, the limit (`?`, or `@limit` / `:limit` / `$limit`); each row's first column is an id (text or integer). Unset: the source cannot list ids.",
      }),
    ),
  },
  {
    additionalProperties: false,
    description: 'One parameterised query on an SQLite file (better-sqlite3).',
  },
);

/** `source` of a table whose items are JSON documents of an HTTP origin. */
export const HttpSourceSchema = Type.Object(
  {
    kind: Type.Literal('http', { description: 'Selects this kind of source.' }),
    url: Type.String({
      pattern: '^https?://.*\\{id\\}',
      description:
        'An `http:` or `https:` URL containing `{id}`, replaced by the URL-encoded id on each GET. No credentials (`user:password@`): send them in `headers`.',
    }),
    timeoutMs: Type.Optional(
      ms(
        "A GET slower than this fails the load; never beyond the table's `loadTimeoutMs`.",
        DEFAULT_HTTP_TIMEOUT_MS,
      ),
    ),
    headers: Type.Optional(
      map(Type.String({ pattern: HEADER_VALUE_PATTERN }), {
        propertyNames: { pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$" },
        description:
          'Extra request headers (e.g. `authorization`). `accept: application/json` is sent unless set here. Names are HTTP tokens; values may not contain CR, LF or NUL.',
      }),
    ),
    maxBodyBytes: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: GIB,
        default: DEFAULT_MAX_BODY_BYTES,
        description: 'Largest response body read; a larger one fails the load.',
      }),
    ),
  },
  {
    additionalProperties: false,
    description:
      'GET a URL with the id in it; 200 JSON is the item (its `Surrogate-Key` and `Cache-Tag` headers are its purge tags), 404 is "not found"; any other answer, a redirect (never followed), a body that is not JSON or too large, or a timeout fails the load (`ECC_LOAD_FAILED`, never cached).',
  },
);

/** The fields of the `postgres` and `mysql` sources, but `kind`, `url` and `query`. */
function sqlFields(listExample: string, limitExample: string) {
  return {
    query: Type.String({
      minLength: 1,
      description: `One SELECT, parametrised, that takes the ids as one list and returns a row per id it has: \`${listExample}\`. A batch of misses is one query; one id is a list of one. Checked at start-up (it must compile, take one list, be read-only and return \`idColumn\`).`,
    }),
    idColumn: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64,
        default: DEFAULT_ID_COLUMN,
        description:
          'The column whose value, as text, is the row\'s id: rows are matched to the ids asked by it; an id with no row is "not found".',
      }),
    ),
    tagsColumn: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64,
        description:
          "A column of the query's rows holding the row's purge tags: text of tags separated by spaces or commas, an array of tags, or a number; `null` for none; a row without the column fails its load. The column stays in the value. At most 64 tags of 1–128 visible ASCII characters but `|`, else the load fails (`ECC_BAD_ROW_TAGS`).",
      }),
    ),
    poolSize: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100,
        default: DEFAULT_POOL_SIZE,
        description:
          "Most connections open at once. Every session is read-only, with a statement timeout of the table's `loadTimeoutMs`.",
      }),
    ),
    connectTimeoutMs: Type.Optional(
      ms('A connection not established within this fails.', DEFAULT_CONNECT_TIMEOUT_MS),
    ),
    seed: Type.Optional(
      stringEnum(['demo'], {
        description:
          '`demo`: create the table `products` with the demo catalog (10,000 products) first, when it is missing or empty.',
      }),
    ),
    idsQuery: Type.Optional(
      Type.String({
        minLength: 1,
        description: `A query listing ids, most wanted first, for the table's \`warm.top\`: it takes exactly one parameter, the limit (\`${limitExample}\`); each row's first column is an id (text or integer). Checked at start-up. Unset: the source cannot list ids.`,
      }),
    ),
  };
}

/** A replication slot's or publication's name (Postgres: lowercase letters, digits, `_`). */
export const SLOT_NAME_PATTERN = '^[a-z0-9_]{1,63}$';

/** `follow.tables` of either change stream: each watched table and the column naming the cache id. */
function watchedTables(
  table: { maxLength: number; description: string },
  idColumn: { maxLength: number; description: string },
) {
  return Type.Optional(
    Type.Array(
      Type.Object(
        {
          table: Type.String({ minLength: 1, ...table }),
          idColumn: Type.String({ minLength: 1, ...idColumn }),
        },
        { additionalProperties: false },
      ),
      {
        minItems: 1,
        maxItems: 100,
        description:
          "The watched tables and the column of each that names the cache id. Default: the table named like the cache table, by the source's `idColumn`.",
      },
    ),
  );
}

/** `follow.leaseMs` of either change stream. */
const followLeaseMs = () =>
  Type.Optional(
    Type.Integer({
      minimum: 200,
      maximum: 60_000,
      default: 1_500,
      description:
        "How long the stream's lease outlives its holder, ms: when the reading instance dies, another reads within about 1.5 × this.",
    }),
  );

/** `follow.mode` of either change stream. */
const followMode = () =>
  Type.Optional(
    stringEnum(['drop', 'stale'] as const, {
      default: 'drop',
      description:
        'What a change does to a cached row: `drop` it (a DELETE: the next read loads), or mark it `stale` (kept in Valkey, stale from the change: the next read on any instance answers the old value, `Cache-Status` `detail=l2-stale`, while one refresh runs). A TRUNCATE purges the whole table: hard for `drop`, soft for `stale`.',
    }),
  );

/** `follow.readYourWritesWaitMs` of either change stream; `description` names its position header. */
const readYourWritesWaitMs = (description: string) =>
  Type.Optional(Type.Integer({ minimum: 0, maximum: 10_000, default: 200, description }));

/** `source.follow` of a `postgres` table: invalidation from Postgres's change stream. */
export const PostgresFollowSchema = Type.Object(
  {
    mode: followMode(),
    slot: Type.Optional(
      Type.String({
        pattern: SLOT_NAME_PATTERN,
        description:
          'The logical replication slot the fleet reads (one instance at a time, under a lease in Valkey). Default `echostore_<table>`, with a `namespace` `echostore_<namespace>_<table>` (`-` as `_`; a name longer than 63 characters is `echostore_` and 16 hex digits of its SHA-256), so deployments in two namespaces never share a slot.',
      }),
    ),
    publication: Type.Optional(
      Type.String({
        pattern: SLOT_NAME_PATTERN,
        description: "The publication of the watched tables. Default: the slot's name.",
      }),
    ),
    create: Type.Optional(
      Type.Boolean({
        default: true,
        description:
          'Create the publication (`FOR TABLE` the watched tables) and the slot (`pgoutput`) when missing. false: both must exist (checked at start-up).',
      }),
    ),
    tables: watchedTables(
      { maxLength: 127, description: '`name` or `schema.name` (schema `public` by default).' },
      {
        maxLength: 63,
        description:
          "The column of this table's changes whose value, as text, is the cache id to invalidate (for a row built from several tables, the column naming it in each).",
      },
    ),
    url: Type.Optional(
      Type.String({
        pattern: '^postgres(ql)?://',
        description:
          "The replication connection's URL (a user with REPLICATION). Default: the source's `url`.",
      }),
    ),
    leaseMs: followLeaseMs(),
    statusIntervalMs: Type.Optional(
      Type.Integer({
        minimum: 20,
        maximum: 10_000,
        default: 200,
        description:
          'How often the reader sends Postgres its acknowledged position and asks for a keepalive (which moves the stream position past WAL with no watched change), ms.',
      }),
    ),
    readYourWritesWaitMs: readYourWritesWaitMs(
      'A read with `Echostore-Min-Lsn` waits at most this long for the stream to pass that position (then it is answered past L1, `ryw=stream`), else the source answers (`ryw=source`), ms.',
    ),
  },
  {
    additionalProperties: false,
    description:
      "Follow Postgres's changes: each INSERT, UPDATE and DELETE of a watched table invalidates the cache ids it names, through the same path as DELETE (soft in `stale` mode), a TRUNCATE purges the table, and each is acknowledged to Postgres only after. Needs `wal_level=logical`.",
  },
);

/** `source.follow` of a `mysql` table: invalidation from the row binlog (MySQL or MariaDB). */
export const MysqlFollowSchema = Type.Object(
  {
    mode: followMode(),
    stream: Type.Optional(
      Type.String({
        pattern: SLOT_NAME_PATTERN,
        description:
          "The stream's name: it names its lease and its saved binlog position in Valkey. Default `echostore_<table>`, with a `namespace` `echostore_<namespace>_<table>` (`-` as `_`), so deployments in two namespaces never share a lease or a position.",
      }),
    ),
    tables: watchedTables(
      { maxLength: 129, description: "`name` or `database.name` (the URL's database by default)." },
      {
        maxLength: 64,
        description: "The column of this table's row events whose value, as text, is the cache id.",
      },
    ),
    url: Type.Optional(
      Type.String({
        pattern: '^(mysql|mariadb)://',
        description:
          "The binlog connection's URL (a user with REPLICATION SLAVE and REPLICATION CLIENT). Default: the source's `url`.",
      }),
    ),
    serverId: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 4_294_967_295,
        description:
          "The replica server id the reader connects as; unique among the server's replicas. Default: 4,200 plus a hash of the stream's name.",
      }),
    ),
    leaseMs: followLeaseMs(),
    readYourWritesWaitMs: readYourWritesWaitMs(
      "A read with `Echostore-Min-Binlog: <File>:<Position>` (`SHOW MASTER STATUS` after the client's commit) waits at most this long for the stream to pass that position (then it is answered past L1, `ryw=stream`), else the source answers (`ryw=source`), ms.",
    ),
  },
  {
    additionalProperties: false,
    description:
      'Follow the row binlog (`binlog_format=ROW`): each row event of a watched table invalidates the cache id it names, through the same path as DELETE (soft in `stale` mode), a `TRUNCATE` statement of one purges the table; the position is saved in Valkey only after. Needs the binlog on.',
  },
);

/** A SQL source's schema: `kind`, its `url`, the {@link sqlFields} and its change stream's `follow`. */
function sqlSourceSchema<K extends string, F extends TSchema>(
  kind: K,
  url: { pattern: string; description: string },
  examples: [list: string, limit: string],
  follow: F,
  description: string,
) {
  return Type.Object(
    {
      kind: Type.Literal(kind, { description: 'Selects this kind of source.' }),
      url: Type.String(url),
      ...sqlFields(...examples),
      follow: Type.Optional(follow),
    },
    { additionalProperties: false, description },
  );
}

/** `source` of a table whose items are rows of a PostgreSQL database. */
export const PostgresSourceSchema = sqlSourceSchema(
  'postgres',
  {
    pattern: '^postgres(ql)?://',
    description:
      '`postgres://user[:password]@host[:port]/database` (libpq URL parameters such as `sslmode` allowed). Never repeated in error messages.',
  },
  [
    'SELECT … FROM products WHERE id = ANY($1)',
    'SELECT id FROM products ORDER BY sales DESC LIMIT $1',
  ],
  PostgresFollowSchema,
  'One parametrised query on PostgreSQL (the `pg` driver, a bounded pool); misses are loaded in batches, one `= ANY($1)` query each (`batchWindowMs`, `maxBatchSize`).',
);

/** `source` of a table whose items are rows of a MySQL or MariaDB database. */
export const MysqlSourceSchema = sqlSourceSchema(
  'mysql',
  {
    pattern: '^(mysql|mariadb)://',
    description:
      '`mysql://user[:password]@host[:port]/database` (MySQL or MariaDB). Never repeated in error messages.',
  },
  ['SELECT … FROM products WHERE id IN (?)', 'SELECT id FROM products ORDER BY sales DESC LIMIT ?'],
  MysqlFollowSchema,
  'One parametrised query on MySQL or MariaDB (the `mysql2` driver, server-side prepared statements, a bounded pool); misses are loaded in batches, one `IN (…)` query each (`batchWindowMs`, `maxBatchSize`).',
);

/** The source schemas by `kind`. */
export const SOURCE_SCHEMAS = {
  sqlite: SqliteSourceSchema,
  http: HttpSourceSchema,
  postgres: PostgresSourceSchema,
  mysql: MysqlSourceSchema,
} as const;

/** A table's `source` as written in the configuration file. */
export type FileSourceConfig =
  | Static<typeof SqliteSourceSchema>
  | Static<typeof HttpSourceSchema>
  | Static<typeof PostgresSourceSchema>
  | Static<typeof MysqlSourceSchema>;

const SourceSchema = Type.Unsafe<FileSourceConfig>({
  type: 'object',
  discriminator: { propertyName: 'kind' },
  required: ['kind'],
  properties: { kind: { enum: Object.keys(SOURCE_SCHEMAS) } },
  oneOf: Object.values(SOURCE_SCHEMAS),
  description: 'Where the items come from, by kind.',
});

/** Most ids a table's start-up warm-up may name (`ids`, `file` or `top`). */
export const MAX_STARTUP_WARM_IDS = 100_000;
/** Default of `warm.concurrency`. */
export const DEFAULT_WARM_CONCURRENCY = 4;
/** Default of `warm.timeoutMs`, ms. */
export const DEFAULT_WARM_TIMEOUT_MS = 60_000;

/** `warm` of a table: what to read into the cache at start, before `/readyz` says ready. */
export const WarmSchema = Type.Object(
  {
    ids: Type.Optional(
      Type.Array(Type.String({ minLength: 1 }), {
        minItems: 1,
        maxItems: MAX_STARTUP_WARM_IDS,
        description: 'The ids to warm, in order: 1 to 100,000.',
      }),
    ),
    file: Type.Optional(
      Type.String({
        minLength: 1,
        description: `A text file of ids, one per line (UTF-8; a trailing CR is dropped, empty lines are skipped), relative to the config file's directory; at most ${MAX_STARTUP_WARM_IDS.toLocaleString('en')} ids and ${(MAX_STARTUP_WARM_IDS * 514).toLocaleString('en')} bytes (that many ids of the longest, 512 bytes, with CRLF; read no further, so a file that never ends is refused). Read at start: an unreadable file stops the start.`,
      }),
    ),
    top: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_STARTUP_WARM_IDS,
        description:
          'Warm the first `top` ids the source lists, most wanted first. Only a source that can list ids: `sqlite`, `postgres` or `mysql` with `idsQuery`.',
      }),
    ),
    concurrency: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 64,
        default: DEFAULT_WARM_CONCURRENCY,
        description:
          "Reads the warm-up keeps in flight at once: a small share of the table's load limit (it starts at `initialConcurrentLoads`), so that warm-up does not crowd out (or shed) itself or live traffic. A read shed with `ECC_SHED` is retried after its `Retry-After`, up to 3 times.",
      }),
    ),
    timeoutMs: Type.Optional(
      ms(
        'The warm-up of this table stops after this long; the ids not read by then are counted as `skipped`, and the service becomes ready anyway.',
        DEFAULT_WARM_TIMEOUT_MS,
      ),
    ),
  },
  {
    additionalProperties: false,
    description:
      'Warm-up at start: exactly one of `ids`, `file` and `top`. Each id is read through the normal read path (L1, Valkey, then the source under the load limit); `/readyz` answers 503 `warming` until every table has finished.',
  },
);

/** One table: where its items come from, what to warm at start, and its freshness policy (every policy field optional). */
export const TableSchema = Type.Object(
  { source: SourceSchema, warm: Type.Optional(WarmSchema), ...TablePolicySchema.properties },
  { additionalProperties: false },
);

/**
 * The ACL user and password fields of `prefix` (`valkey.` for the data nodes,
 * `valkey.sentinel.` for the Sentinels), `who` naming those servers in the descriptions.
 */
function credentialFields(who: string, prefix: string) {
  return {
    username: Type.Optional(
      Type.String({
        minLength: 1,
        description: `The ACL user on ${who}. Unset: \`default\` (the \`requirepass\` user). Needs \`${prefix}password\` or \`${prefix}passwordFile\`.`,
      }),
    ),
    password: Type.Optional(
      Type.String({
        minLength: 1,
        description: `The password (or AUTH token) on ${who}, inline; never logged or repeated in errors. Not with \`${prefix}passwordFile\`.`,
      }),
    ),
    passwordFile: Type.Optional(
      Type.String({
        minLength: 1,
        description: `A file holding the password on ${who} (trailing newline trimmed), relative to the config file's directory: a mounted secret. At most 64 KiB (read no further: a larger file, or one that never ends, is refused). Read at start (unreadable or empty: refused) and again whenever a connection is (re)established, so a rotated password is used without a restart.`,
      }),
    ),
  };
}

/** `valkey`: how the service reaches Valkey (or Redis). */
export const ValkeySchema = Type.Object(
  {
    url: Type.String({
      pattern: '^rediss?://',
      default: DEFAULT_VALKEY_URL,
      description:
        '`redis://[user:password@]host[:port][/db]`, or `rediss://…` for TLS; the host is required (a bare `redis://` is refused), port 1–65535, db 0–15. Never repeated in error messages (it may hold a password). A file may name only one of `url`, `cluster` and `sentinel`; the default is ignored when `cluster` or `sentinel` is set.',
    }),
    cluster: Type.Optional(
      Type.Object(
        {
          nodes: Type.Array(Type.String({ pattern: HOST_PORT_PATTERN }), {
            minItems: 1,
            description:
              'Seed nodes, `host:port`: any nodes of the cluster (the rest are discovered). Start-up fails when none answers, or one answers that is not in cluster mode; one that does not answer while others do is logged.',
          }),
        },
        {
          additionalProperties: false,
          description:
            'A Valkey/Redis Cluster (`VALKEY_CLUSTER_NODES=host:port,host:port` sets it from the environment). Not with `url` or `sentinel`. With `valkey.tls`, every node is reached over TLS (run the nodes with `tls-cluster yes`, so the addresses they hand out are TLS ports); `valkey.username` and `valkey.password`/`passwordFile` are used on every node. See operations.md#cluster.',
        },
      ),
    ),
    sentinel: Type.Optional(
      Type.Object(
        {
          sentinels: Type.Array(Type.String({ pattern: HOST_PORT_PATTERN }), {
            minItems: 1,
            description:
              'Sentinels, `host:port`. Start-up fails when none answers, or none monitors `name`.',
          }),
          name: Type.String({
            minLength: 1,
            description: 'The name the Sentinels monitor the primary under.',
          }),
          ...credentialFields("the Sentinels (their own, not the data nodes')", 'valkey.sentinel.'),
        },
        {
          additionalProperties: false,
          description:
            'A primary with replicas managed by Sentinel: the primary is asked of the Sentinels, and a failover is followed without a restart. Not with `url` or `cluster`. With `valkey.tls`, the Sentinels and the primary are both reached over TLS; the primary takes `valkey.username` and `valkey.password`/`passwordFile`, the Sentinels their own below. See operations.md#sentinel.',
        },
      ),
    ),
    ...credentialFields('the data nodes (every node of a cluster)', 'valkey.'),
    commandTimeoutMs: ms('A Valkey command not answered within this fails.', 1_000),
    connectTimeoutMs: ms(
      'A connection attempt not established within this fails; also how long start-up waits for Valkey before starting degraded.',
      2_000,
    ),
    coherence: Type.Boolean({
      default: true,
      description:
        "Pub/Sub coherence: a write drops the row from every instance's L1. Needs `&ecc:events:*` and `+@pubsub`. `false`: off; others keep a replaced row until its L1 TTL.",
    }),
    tls: Type.Optional(
      Type.Object(
        {
          caFile: Type.Optional(
            Type.String({
              minLength: 1,
              description:
                "PEM file of the CA certificate(s) that signed the server's certificate, relative to the config file's directory; trusted instead of Node's built-in roots. At most 1 MiB (a public CA bundle is about 220 KB); a larger file, or one that never ends, is refused.",
            }),
          ),
          rejectUnauthorized: Type.Boolean({
            default: true,
            description:
              'Refuse a server whose certificate does not verify; `false` is for experiments only.',
          }),
          servername: Type.Optional(
            Type.String({
              minLength: 1,
              description:
                "The name sent as SNI and checked against the server's certificate. Unset: the host connected to.",
            }),
          ),
          certFile: Type.Optional(
            Type.String({
              minLength: 1,
              description:
                "PEM file of a client certificate, for servers that ask for one (`tls-auth-clients yes`), relative to the config file's directory. With `keyFile`. At most 1 MiB; a larger file is refused.",
            }),
          ),
          keyFile: Type.Optional(
            Type.String({
              minLength: 1,
              description:
                "PEM file of the client certificate's private key, relative to the config file's directory. With `certFile`. At most 64 KiB; a larger file is refused.",
            }),
          ),
        },
        {
          additionalProperties: false,
          description:
            "TLS to Valkey: with `url`, for a `rediss://` URL (refused at start with a `redis://` URL, which would not use it); with `cluster`, to every node; with `sentinel`, to the Sentinels and the primary. Every file is read at start (unreadable, or no PEM block of its kind: refused, naming the field). Unset: plain TCP for a cluster or Sentinel; for `rediss://`, Node's built-in roots, verified, SNI from the URL's host.",
        },
      ),
    ),
  },
  { additionalProperties: false },
);

/** `http`: the HTTP API. */
export const HttpSchema = Type.Object(
  {
    host: Type.String({
      minLength: 1,
      default: '127.0.0.1',
      description: 'Listen address (`0.0.0.0` for every interface).',
    }),
    port: Type.Integer({
      minimum: 0,
      maximum: 65_535,
      default: 8080,
      description: 'Listen port (0: any free port).',
    }),
    bodyLimitBytes: Type.Integer({
      minimum: 1,
      maximum: GIB,
      default: 1024 * 1024,
      description:
        'Largest JSON request body, of any route: a PUT, `items:batchGet`, purge, warm. A larger one is answered 413 `ECC_PAYLOAD_TOO_LARGE`.',
    }),
    maxBatchBytes: Type.Integer({
      minimum: 1024,
      maximum: 256 * 1024 * 1024,
      default: 64 * 1024 * 1024,
      description:
        'Largest batch-read answer (its items, in UTF-16 characters of JSON). The answer is streamed; once it reaches this, every id not yet sent is answered `ECC_BATCH_TOO_LARGE` (413) in its item, without being read: ask for those in another request.',
    }),
    requestTimeoutMs: Type.Integer({
      minimum: 1_000,
      maximum: 600_000,
      default: 30_000,
      description:
        'A request (headers and body) not received in full within this is answered 408 `ECC_REQUEST_TIMEOUT` and its connection closed, so a body that never ends cannot hold a connection (or a graceful shutdown) open.',
    }),
    shutdownDelayMs: Type.Integer({
      minimum: 0,
      maximum: 600_000,
      default: 5_000,
      description:
        'On SIGTERM or SIGINT, how long the service keeps serving while `/readyz` already answers 503 `closing`, so that load balancers and Kubernetes endpoints stop sending traffic before it stops accepting connections. 0: stop accepting at once.',
    }),
    adminToken: Type.Optional(
      Type.String({
        minLength: 16,
        maxLength: 512,
        pattern: ADMIN_TOKEN_PATTERN,
        description:
          'Bearer token required by PUT, DELETE, warm-up, purge and the admin inspect route: visible ASCII characters. Better set by the environment, so that the secret need not live in the file. Unset: protected mode, those routes answer loopback clients only (403 `ECC_PROTECTED_MODE` to others), and start-up warns when `host` is beyond loopback.',
      }),
    ),
  },
  { additionalProperties: false },
);

/** `log`: the pino logger. */
export const LogSchema = Type.Object(
  {
    level: stringEnum(LOG_LEVELS, {
      default: 'info',
      description: 'Least severe pino level logged, or `silent`.',
    }),
    accessSampleRate: Type.Number({
      minimum: 0,
      maximum: 1,
      default: 0,
      description:
        'The access log: the share of requests logged, one `info` line each (`request`: method, URL, route, status, response time). 0: off; 1: every request; 0.01: about one in a hundred.',
    }),
  },
  { additionalProperties: false },
);

/** The OTLP/HTTP encodings `tracing.protocol` takes (OTLP's `grpc` is not one: no gRPC client is shipped). */
export const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;

/** An OTLP/HTTP encoding: protobuf (OTLP's default) or JSON. */
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];

/** Default of the OTLP endpoint (OpenTelemetry's, for OTLP/HTTP): traces go to `<endpoint>/v1/traces`. */
export const DEFAULT_OTLP_ENDPOINT = 'http://localhost:4318';

/** `tracing`: the service's own trace export (the library never starts one). */
export const TracingSchema = Type.Object(
  {
    exporter: Type.Optional(
      stringEnum(['otlp', 'none'], {
        description:
          '`otlp`: export spans over OTLP/HTTP; `none`: no export. Unset: `otlp` when an endpoint is given (`endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), else `none`. `OTEL_TRACES_EXPORTER` overrides it; `OTEL_SDK_DISABLED=true` turns the export off.',
      }),
    ),
    endpoint: Type.Optional(
      Type.String({
        pattern: '^https?://',
        description: `The collector's base URL, \`http:\` or \`https:\`, no credentials; spans are POSTed to \`<endpoint>/v1/traces\`, as with \`OTEL_EXPORTER_OTLP_ENDPOINT\` (which overrides it, and \`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT\` overrides both, used as is). Unset: \`${DEFAULT_OTLP_ENDPOINT}\`.`,
      }),
    ),
    protocol: Type.Optional(
      stringEnum(OTLP_PROTOCOLS, {
        default: 'http/protobuf',
        description:
          'The OTLP/HTTP encoding: `http/protobuf` or `http/json`. `OTEL_EXPORTER_OTLP_PROTOCOL` and `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` override it; `grpc` is refused.',
      }),
    ),
    headers: Type.Optional(
      map(Type.String({ pattern: HEADER_VALUE_PATTERN }), {
        propertyNames: { pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$" },
        description:
          'Headers sent with every export (e.g. an `authorization` the collector asks for); `OTEL_EXPORTER_OTLP_HEADERS` adds to them (a name in both: this one). Names are HTTP tokens; values may not contain CR, LF or NUL.',
      }),
    ),
    ids: Type.Optional(
      stringEnum(['hash', 'plain'], {
        default: 'hash',
        description:
          "How ids appear in spans (`echostore.id`): `hash`, the first 16 hex digits of the id's SHA-256 (ids are often personal data), or `plain`.",
      }),
    ),
  },
  {
    additionalProperties: false,
    description:
      "Traces of the service: with an exporter, `serve` starts the OpenTelemetry SDK (a batch span processor and an OTLP/HTTP exporter) and traces every read (`echostore.get`, `echostore.load`), taking the caller's `traceparent` and passing it to HTTP origins; the last spans are flushed at shutdown. The SDK reads its own `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.",
  },
);

/** `namespace`: what every key and channel of the service lives in. */
export const NamespaceSchema = Type.String({
  pattern: '^[a-z0-9_-]{1,64}$',
  description:
    "Every key, lease, tombstone, purge epoch and channel lives in it (`ecc:<namespace>:<table>:…`, `ecc:events:<namespace>:<table>`), so two deployments on one Valkey in different namespaces never read each other's rows. `ECHOSTORE_NAMESPACE` sets it from the environment. Unset: the unnamed namespace of earlier releases (`ecc:<table>:…`); the built-in demo uses `demo`.",
});

/**
 * JSON schema of a configuration file after YAML parsing and after the loader has filled in
 * the defaults of the {@link SECTIONS} (so they and their defaulted fields are required here);
 * table policy defaults are applied later by `resolvePolicy`, so `tables` stays as written.
 */

export const configSchema = Type.Object(
  {
    namespace: Type.Optional(NamespaceSchema),
    valkey: ValkeySchema,
    http: HttpSchema,
    log: LogSchema,
    tracing: Type.Optional(TracingSchema),
    tables: map(TableSchema, {
      minProperties: 1,
      propertyNames: { pattern: '^[a-z0-9_-]{1,64}$', not: { enum: RESERVED_TABLE_NAMES } },
      description: `Tables by name: lowercase letters, digits, \`_\` and \`-\`, 1–64 characters, not ${RESERVED_TABLE_NAMES.map((n) => `\`${n}\``).join(', ')}. At least one.`,
    }),
  },
  { additionalProperties: false },
);

/** The sections of a configuration file whose fields have defaults. */
export const SECTIONS = ['valkey', 'http', 'log'] as const;

/** One table: where its items come from, and its freshness policy (every policy field optional). */
export type TableConfig = Static<typeof TableSchema>;

/** A configuration file after validation, every default of `valkey`, `http` and `log` applied. */
export type FileConfig = Static<typeof configSchema>;

/**
 * The validated configuration, with every default applied. Durations are milliseconds,
 * sizes bytes; each field's meaning, bounds and default are in {@link configSchema}.
 */
export interface ServiceConfig extends FileConfig {
  /** Where the config came from: the file path, or 'built-in demo'. */
  origin: string;
  /**
   * The trace export `serve` starts, from `tracing` and the `OTEL_*` environment
   * (src/config/otlp.ts); undefined: none.
   */
  traceExport?: TraceExportConfig;
}

/** Where and how `serve` exports spans: resolved from `tracing` and the `OTEL_*` environment. */
export interface TraceExportConfig {
  /** The URL spans are POSTed to (`…/v1/traces`). */
  url: string;
  protocol: OtlpProtocol;
  /** Sent with every export; `OTEL_EXPORTER_OTLP_HEADERS` is added by the exporter. */
  headers: Record<string, string>;
  /** How ids appear in spans. */
  ids: 'hash' | 'plain';
}
