/** The `tagsColumn` of a SQL source: a row's purge tags, read from one of its columns. */
import { RowTagsError } from '../errors.js';
import { withPolicy } from '../store/load-result.js';
import { splitTags } from '../store/tags.js';
import type { LoadManyFn } from '../store/types.js';
import type { Source } from './source.js';

/**
 * The tags in a column's value: a text of tags separated by whitespace or commas, an array
 * (Postgres `text[]`, a JSON array) of tags, or a number (its decimal text); none for
 * `null`. Bounds are the store's to check (`ECC_BAD_ROW_TAGS`).
 */
export function tagsOf(value: unknown): string[] {
  if (value === null || value === undefined) return [];
  if (Array.isArray(value)) return value.map(String);
  if (typeof value === 'number' || typeof value === 'bigint') return [String(value)];
  return splitTags(String(value));
}

/**
 * A row with its tags, as `withPolicy` gives them to the store; anything but an object row
 * (none found, a negative answer) as it is.
 *
 * @throws {RowTagsError} `ECC_BAD_ROW_TAGS` (`missingColumn`) when the row has no such column: a row stored
 *   untagged could never be purged by its tags, so a misnamed `tagsColumn` fails every load,
 *   loudly, instead of caching rows that tag purges silently miss.
 */
function tagged(row: unknown, column: string, id: string): unknown {
  if (row === null || typeof row !== 'object') return row;
  if (!(column in row)) {
    throw new RowTagsError(
      `the row has no column "${column}" (source.tagsColumn): check the query returns it`,
      { id, missingColumn: true },
    );
  }
  const tags = tagsOf((row as Record<string, unknown>)[column]);
  return tags.length === 0 ? row : withPolicy(row, { tags });
}

/**
 * `source` whose rows carry the tags of their `column` (the column stays in the value).
 * A row whose column is `null` is untagged; a row without the column fails its load
 * (`ECC_BAD_ROW_TAGS`).
 */
export function withTagsColumn(source: Source, column: string): Source {
  const { load, loadMany } = source;
  const wrapped: Source = {
    ...source,
    load: async (id, ctx) => tagged(await load(id, ctx), column, id),
  };
  if (loadMany !== undefined) {
    const many: LoadManyFn = async (ids, ctx) => {
      const rows = await loadMany(ids, ctx);
      const out = new Map<string, unknown>();
      for (const [id, row] of rows) {
        try {
          out.set(id, row instanceof Error ? row : tagged(row, column, id));
        } catch (err) {
          out.set(id, err);
        }
      }
      return out;
    };
    wrapped.loadMany = many;
  }
  return wrapped;
}
