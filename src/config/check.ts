/**
 * Every refusal `serve` can decide before it connects to anything, in one
 * function that `serve` and `check-config` both run, so the two cannot drift:
 * a configuration `check-config` passes starts, or fails only on what needs a
 * server to tell (Valkey, a database, a change stream) or the listen address.
 */
import { existsSync } from 'node:fs';
import { ConfigError } from '../errors.js';
import { httpSource } from '../sources/http.js';
import { MYSQL_SCHEMES, splitAtPlaceholder } from '../sources/mysql.js';
import { POSTGRES_SCHEMES } from '../sources/postgres.js';
import { checkSqlOptions } from '../sources/sql.js';
import { sqliteSource } from '../sources/sqlite.js';
import { parseAddress } from '../valkey/topology.js';
import { cannotListIds, idsFile } from '../warm/startup.js';
import { type LoadConfigOptions, loadConfig } from './load.js';
import type { FileSourceConfig, ServiceConfig, TableConfig } from './schema.js';

/**
 * {@link loadConfig}, then {@link checkStartup}: the configuration `serve` starts on.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG`, from either.
 */
export async function loadStartupConfig(options: LoadConfigOptions): Promise<ServiceConfig> {
  const config = loadConfig(options);
  await checkStartup(config);
  return config;
}

/**
 * Checks what the schema and the loader cannot and the start would refuse,
 * with the error the start would give, touching only local files:
 *
 * - each table's source as it is built, without connecting: an `http` source
 *   is built and closed (a URL that does not parse or carries credentials); an
 *   `sqlite` file is opened read-only and its `query` and `idsQuery` prepared
 *   (a missing file, a query that does not compile or binds otherwise) unless
 *   `seed` creates it at start; a `postgres` or `mysql` URL parses with its
 *   scheme and names a database, and a `mysql` query has its one `?`;
 * - `warm.top` on a source that cannot list ids (an `http` source, or one
 *   without `idsQuery`), and a `warm.file` that cannot be read or holds too many ids;
 * - `valkey.cluster.nodes` and `valkey.sentinel.sentinels` ports 1–65535.
 *
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming the file and the field.
 */
export async function checkStartup(config: ServiceConfig): Promise<void> {
  try {
    const { cluster, sentinel } = config.valkey;
    for (const [i, node] of (cluster?.nodes ?? []).entries()) {
      parseAddress(node, `valkey.cluster.nodes.${i}`);
    }
    for (const [i, s] of (sentinel?.sentinels ?? []).entries()) {
      parseAddress(s, `valkey.sentinel.sentinels.${i}`);
    }
    for (const [name, table] of Object.entries(config.tables)) {
      await checkSource(table.source, `tables.${name}.source`);
      checkWarm(name, table);
    }
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    throw new ConfigError(`${config.origin}: ${err.message}`, { cause: err, field: err.field });
  }
}

async function checkSource(source: FileSourceConfig, field: string): Promise<void> {
  switch (source.kind) {
    case 'http': {
      const { kind: _, ...options } = source;
      await httpSource(options, field).close();
      return;
    }
    case 'sqlite': {
      const { kind: _, seed, ...options } = source;
      // A seeded file is created (or completed) at start: without it, or without its table yet,
      // there is nothing to check; with both, its queries are checked like any file's (never seeded here).
      if (seed !== undefined && !existsSync(options.file)) return;
      try {
        await sqliteSource(options, field).close();
      } catch (err) {
        if (seed !== undefined && /no such table/i.test((err as Error).message)) return;
        throw err;
      }
      return;
    }
    case 'postgres':
      checkSqlOptions(source, field, POSTGRES_SCHEMES);
      return;
    case 'mysql':
      checkSqlOptions(source, field, MYSQL_SCHEMES);
      splitAtPlaceholder(source.query, field);
      return;
  }
}

function checkWarm(name: string, table: TableConfig): void {
  const { warm, source } = table;
  if (warm === undefined) return;
  if (warm.top !== undefined && (source.kind === 'http' || source.idsQuery === undefined)) {
    throw cannotListIds(name);
  }
  if (warm.file !== undefined) idsFile(warm.file, `tables.${name}.warm.file`);
}
