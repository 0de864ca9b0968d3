/** The `tagsColumn` of a SQL source: a row's purge tags, read from one of its columns. */
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

/** A row with its tags, as `withPolicy` gives them to the store; anything but an object row as it is. */
function tagged(row: unknown, column: string): unknown {
  if (row === null || typeof row !== 'object' || !(column in row)) return row;
  const tags = tagsOf((row as Record<string, unknown>)[column]);
  return tags.length === 0 ? row : withPolicy(row, { tags });
}

/**
 * `source` whose rows carry the tags of their `column` (the column stays in the value).
 * A row without the column is untagged.
 */
export function withTagsColumn(source: Source, column: string): Source {
  const { load, loadMany } = source;
  const wrapped: Source = {
    ...source,
    load: async (id, ctx) => tagged(await load(id, ctx), column),
  };
  if (loadMany !== undefined) {
    const many: LoadManyFn = async (ids, ctx) => {
      const rows = await loadMany(ids, ctx);
      const out = new Map<string, unknown>();
      for (const [id, row] of rows) out.set(id, row instanceof Error ? row : tagged(row, column));
      return out;
    };
    wrapped.loadMany = many;
  }
  return wrapped;
}
