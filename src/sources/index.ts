/** Source kinds by configuration: `sqlite` and `http`. */
import { httpSource } from './http.js';
import type { Source } from './source.js';
import { sqliteSource } from './sqlite.js';

export { SourceError } from '../errors.js';
export { ensureDemoCatalog } from './demo.js';
export { type HttpSourceOptions, httpSource } from './http.js';
export type { Source } from './source.js';
export { type SqliteSourceOptions, sqliteSource } from './sqlite.js';

/** A table's `source` as written in the configuration file. */
export type SourceConfig =
  | { kind: 'sqlite'; file: string; query: string; seed?: 'demo'; idsQuery?: string }
  | {
      kind: 'http';
      url: string;
      timeoutMs?: number;
      headers?: Record<string, string>;
      maxBodyBytes?: number;
    };

/**
 * Builds the source a table's `source` configuration describes.
 *
 * @param field - dotted path of `config` in the configuration (e.g. `tables.products.source`),
 *   used in error messages.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming the field, when the source cannot be set up
 *   (see {@link sqliteSource} and {@link httpSource}).
 */
export function buildSource(config: SourceConfig, field = 'source'): Source {
  switch (config.kind) {
    case 'sqlite': {
      const { kind: _, ...options } = config;
      return sqliteSource(options, field);
    }
    case 'http': {
      const { kind: _, ...options } = config;
      return httpSource(options, field);
    }
  }
}
