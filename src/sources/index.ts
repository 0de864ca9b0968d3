/** Source kinds by configuration: `sqlite`, `http`, `postgres` and `mysql`. */

import type { FileSourceConfig } from '../config/schema.js';
import { httpSource } from './http.js';
import { mysqlSource } from './mysql.js';
import { postgresSource } from './postgres.js';
import type { Source } from './source.js';
import type { SqlSourceContext } from './sql.js';
import { sqliteSource } from './sqlite.js';
import { withTagsColumn } from './tags-column.js';

export { SourceError } from '../errors.js';
export { ensureDemoCatalog } from './demo.js';
export { sourceFingerprint } from './fingerprint.js';
export { type HttpSourceOptions, httpSource } from './http.js';
export { type MysqlSourceContext, mysqlSource } from './mysql.js';
export { type PostgresSourceContext, postgresSource } from './postgres.js';
export type { Source } from './source.js';
export type { SqlSourceContext, SqlSourceOptions } from './sql.js';
export { type SqliteSourceOptions, sqliteSource } from './sqlite.js';

/** A table's `source` as written in the configuration file (its schema's type). */
export type SourceConfig = FileSourceConfig;

/** What the store tells {@link buildSource} about the table: the field of the source (for errors) and its `loadTimeoutMs`. */
export type BuildContext = SqlSourceContext;

/**
 * Builds the source a table's `source` configuration describes; the SQL kinds
 * connect and check their query before it resolves.
 *
 * @throws {ConfigError} (rejects) `ECC_BAD_CONFIG` naming the field, when the source cannot be
 *   set up (see {@link sqliteSource}, {@link httpSource}, {@link postgresSource}, {@link mysqlSource}).
 */
export async function buildSource(config: SourceConfig, context: BuildContext): Promise<Source> {
  // The SQL kinds check at start that their query returns the tags column.
  const source = await buildKind(config, context);
  if (config.kind === 'http' || config.tagsColumn === undefined) return source;
  return withTagsColumn(source, config.tagsColumn);
}

/** The source of one kind, without its tags read (the SQL kinds check the column exists). */
async function buildKind(config: SourceConfig, context: BuildContext): Promise<Source> {
  const field = context.field ?? 'source';
  switch (config.kind) {
    case 'sqlite': {
      const { kind: _, ...options } = config;
      return sqliteSource(options, field);
    }
    case 'http': {
      const { kind: _, ...options } = config;
      return httpSource(options, field);
    }
    case 'postgres': {
      // `follow` is the change stream's (src/changes/), not the loader's.
      const { kind: _, follow: _follow, ...options } = config;
      return postgresSource(options, { field, loadTimeoutMs: context.loadTimeoutMs });
    }
    case 'mysql': {
      const { kind: _, follow: _follow, ...options } = config;
      return mysqlSource(options, { field, loadTimeoutMs: context.loadTimeoutMs });
    }
  }
}
