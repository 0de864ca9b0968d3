/** The fingerprint of a configured source: what names it in every row it writes. */
import { createHash } from 'node:crypto';
import { basename } from 'node:path';
import type { FileSourceConfig } from '../config/schema.js';

/** A database URL's `host:port/database`: no user or password, which may change without the data changing. */
function databaseOf(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port}${u.pathname}`;
  } catch {
    return url;
  }
}

/**
 * 16 hex digits of SHA-256 over what identifies where a table's rows come from: its kind, and
 * the URL template (`http`), the database's host, port and name (`postgres`, `mysql`: not its
 * credentials) or the file's name (`sqlite`: not its directory, which differs between hosts),
 * and the query (and `tagsColumn`: rows stored without their tags are reloaded once it is set).
 * Two instances configured alike agree; a table of the same name served from
 * another source does not, so neither serves the other's rows.
 */
export function sourceFingerprint(config: FileSourceConfig): string {
  let where: string[];
  switch (config.kind) {
    case 'http':
      where = [config.url];
      break;
    case 'sqlite':
      where = [basename(config.file), config.query, config.tagsColumn ?? ''];
      break;
    case 'postgres':
    case 'mysql':
      where = [
        databaseOf(config.url),
        config.query,
        config.idColumn ?? 'id',
        config.tagsColumn ?? '',
      ];
      break;
  }
  return createHash('sha256')
    .update(JSON.stringify([config.kind, ...where]))
    .digest('hex')
    .slice(0, 16);
}
