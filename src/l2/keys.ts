/**
 * The key layout of the L2, defined once: every key and channel of a table,
 * in its namespace.
 *
 * The slot rule: an item's keys (value, lease, error) are `<prefix>:{<id>}…`,
 * so the id is their cluster hash tag and one script may touch them together.
 * An id with a brace would cut the tag short (`}a` gives an empty tag), so it
 * is written escaped behind a `~` — `%` as `%25`, `{` as `%7B`, `}` as `%7D`:
 * `}a` → `~{%7Da}`. The mapping is injective (the character after the
 * prefix's colon tells `{` from `~`, and the escape is reversible), and a
 * value key ends in `}` while the others end in `:lease` / `:error`, so no id
 * can address another table's key or another kind of key.
 */

/**
 * The prefix of every key of `table` in `namespace`: `ecc:<table>` in the
 * unnamed namespace (`''`, the layout of 0.1), else `ecc:<namespace>:<table>`.
 * Table names and namespaces cannot contain `:` or braces, and a value key has
 * `{` or `~` right after the prefix's colon while a table name never starts
 * with either, so no key of one namespace is a key of another.
 */
export function keyPrefix(table: string, namespace = ''): string {
  return namespace === '' ? `ecc:${table}` : `ecc:${namespace}:${table}`;
}

/** The Valkey key of an item's envelope: `<prefix>:{<id>}` (see the module's slot rule). */
export function valueKey(table: string, id: string, namespace = ''): string {
  return `${keyPrefix(table, namespace)}:${taggedId(id)}`;
}

/** The Valkey key of an item's lease: {@link valueKey} + `:lease`, in the same slot. */
export function leaseKey(table: string, id: string, namespace = ''): string {
  return `${keyPrefix(table, namespace)}:${taggedId(id)}:lease`;
}

/**
 * The Valkey hash of a table's purge epochs: `<prefix>:epochs`. Its fields are
 * `H` / `S` (the table's hard / soft purge) and `H<tag>` / `S<tag>`; each value
 * is the purge's time on Valkey's clock, µs.
 */
export function epochsKey(table: string, namespace = ''): string {
  return `${keyPrefix(table, namespace)}:epochs`;
}

/** The Valkey key of an item's remembered load failure: {@link valueKey} + `:error`, in the same slot. */
export function errorKey(table: string, id: string, namespace = ''): string {
  return `${keyPrefix(table, namespace)}:${taggedId(id)}:error`;
}

/** `{<id>}`, or `~{<escaped id>}` for an id with a brace (see {@link valueKey}). */
function taggedId(id: string): string {
  if (!/[{}]/.test(id)) return `{${id}}`;
  const escaped = id.replace(/[%{}]/g, (c) => (c === '%' ? '%25' : c === '{' ? '%7B' : '%7D'));
  return `~{${escaped}}`;
}

/**
 * The pub/sub channel of a table's fills, invalidations and purges:
 * `ecc:events:<table>`, or `ecc:events:<namespace>:<table>` in a namespace
 * (one ACL channel pattern, `&ecc:events:*`, covers every namespace).
 */
export function eventsChannel(table: string, namespace = ''): string {
  return namespace === '' ? `ecc:events:${table}` : `ecc:events:${namespace}:${table}`;
}
