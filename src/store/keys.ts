import { BadIdError, UnknownTableError } from '../errors.js';

/** Table names: lowercase letters, digits, `_` and `-`, 1–64 characters. */
export const TABLE_NAME = /^[a-z0-9_-]{1,64}$/;

/** Names a table may not take: they collide with JavaScript object internals. */
export const RESERVED_TABLE_NAMES: ReadonlySet<string> = new Set([
  '__proto__',
  'constructor',
  'prototype',
]);

/** Longest id accepted, in UTF-8 bytes. */
export const MAX_ID_BYTES = 512;

// Not printable: C0/C1 controls and DEL (Cc), invisible format characters such
// as U+202E RIGHT-TO-LEFT OVERRIDE, U+200B and the BOM (Cf), line and paragraph
// separators (Zl, Zp), and the Unicode noncharacters.
const NOT_PRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\uFDD0-\uFDEF\uFFFE\uFFFF]/u;

/**
 * Checks a table name against {@link TABLE_NAME}.
 *
 * @throws {UnknownTableError} `ECC_UNKNOWN_TABLE` when the name is malformed.
 */
export function assertTableName(table: string): void {
  if (!TABLE_NAME.test(table)) {
    throw new UnknownTableError(`table name must match ${TABLE_NAME.source}`, { table });
  }
}

/**
 * Checks an item id: 1–512 bytes of well-formed, printable UTF-8 (no control,
 * format or separator characters, no noncharacters), and the table's own
 * `idPattern` when it has one.
 *
 * @throws {BadIdError} `ECC_BAD_ID`, before anything touches Valkey or the source.
 */
export function assertId(table: string, id: unknown, pattern?: RegExp): asserts id is string {
  if (typeof id !== 'string' || id.length === 0) {
    throw new BadIdError('id must be a non-empty string', { table });
  }
  if (!id.isWellFormed()) {
    throw new BadIdError('id must be well-formed UTF-8', { table });
  }
  // A UTF-16 code unit is at most 3 UTF-8 bytes: short ids need no byte count.
  if (id.length > MAX_ID_BYTES / 3 && Buffer.byteLength(id, 'utf8') > MAX_ID_BYTES) {
    throw new BadIdError(`id must be at most ${MAX_ID_BYTES} bytes of UTF-8`, { table });
  }
  if (NOT_PRINTABLE.test(id)) {
    throw new BadIdError('id must be printable (no control, format or separator characters)', {
      table,
    });
  }
  if (pattern !== undefined && !pattern.test(id)) {
    throw new BadIdError(`id must match ${pattern.source}`, { table });
  }
}

/**
 * The Valkey key of an item's envelope: `ecc:<table>:{<id>}`.
 *
 * The hash tag `{<id>}` keeps an item and its lease in one cluster slot. The
 * mapping is injective: table names cannot contain `:`, and the value key
 * ends in `}` while a lease key ends in `:lease`, so no id can address another
 * table's key or a lease key.
 */
export function valueKey(table: string, id: string): string {
  return `ecc:${table}:{${id}}`;
}

/** The Valkey key of an item's lease: `ecc:<table>:{<id>}:lease`. */
export function leaseKey(table: string, id: string): string {
  return `ecc:${table}:{${id}}:lease`;
}

/** The pub/sub channel of a table's fills and invalidations: `ecc:events:<table>`. */
export function eventsChannel(table: string): string {
  return `ecc:events:${table}`;
}
