/**
 * Purge tags: what a row may carry (from an origin's `Surrogate-Key` or
 * `Cache-Tag`, a SQL column, or `withPolicy(value, { tags })`) and what a purge
 * may name. Bounded, so a row's header and a purge stay small.
 */
import { BadPurgeError, RowTagsError } from '../errors.js';

/** Most tags one row keeps. */
export const MAX_ROW_TAGS = 64;
/** Most tags one purge names. */
export const MAX_PURGE_TAGS = 256;
/** Longest tag, in bytes (visible ASCII: one byte each). */
export const MAX_TAG_BYTES = 128;

/** A tag: 1–128 visible ASCII characters but `|` (the value header's separator). */
export const TAG = /^[\x21-\x7b\x7d\x7e]{1,128}$/;

/**
 * A row's tags, checked and deduplicated in first-seen order.
 *
 * @returns the tags, or undefined for none.
 * @throws {RowTagsError} `ECC_BAD_ROW_TAGS` when a tag is not a {@link TAG} or there are more
 *   than {@link MAX_ROW_TAGS}.
 */
export function rowTags(
  tags: readonly unknown[] | undefined,
  table: string,
  id: string,
): readonly string[] | undefined {
  if (tags === undefined || tags.length === 0) return undefined;
  const distinct = [...new Set(tags)];
  if (distinct.length > MAX_ROW_TAGS) {
    throw new RowTagsError(
      `a row may carry at most ${MAX_ROW_TAGS} tags (got ${distinct.length})`,
      {
        table,
        id,
      },
    );
  }
  for (const tag of distinct) {
    if (typeof tag !== 'string' || !TAG.test(tag)) {
      throw new RowTagsError(
        `a tag must be 1-${MAX_TAG_BYTES} visible ASCII characters other than "|"`,
        { table, id },
      );
    }
  }
  return distinct as string[];
}

/**
 * The tags a purge names, checked and deduplicated.
 *
 * @throws {BadPurgeError} `ECC_BAD_PURGE` when `tags` is not an array of 1–{@link MAX_PURGE_TAGS}
 *   {@link TAG}s.
 */
export function purgeTags(tags: unknown, table: string): string[] {
  if (!Array.isArray(tags) || tags.length === 0 || tags.length > MAX_PURGE_TAGS) {
    throw new BadPurgeError(`tags must be an array of 1-${MAX_PURGE_TAGS} tags`, { table });
  }
  for (const tag of tags) {
    if (typeof tag !== 'string' || !TAG.test(tag)) {
      throw new BadPurgeError(
        `a tag must be 1-${MAX_TAG_BYTES} visible ASCII characters other than "|"`,
        { table },
      );
    }
  }
  return [...new Set(tags as string[])];
}

/**
 * The tags of a text field: separated by whitespace or commas (`Surrogate-Key` is
 * space-separated, Fastly and Varnish xkey; `Cache-Tag` comma-separated; a SQL column either).
 */
export function splitTags(text: string): string[] {
  return text.split(/[\s,]+/).filter((t) => t !== '');
}
