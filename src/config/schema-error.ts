/**
 * The one formatter of JSON-schema (ajv) errors, used by the config loader and
 * by `createStore`: the first error becomes a field as a dotted path and what
 * is wrong with it, in words a user of the configuration file knows.
 */
import type { ErrorObject } from 'ajv';
import { PATTERN_MEANINGS } from './schema.js';

/** One schema failure, for a message `<field>: <reason>`. */
export interface SchemaProblem {
  /** The field at fault as a dotted path (`tables.products.ttlMs`); `(root)` for the whole value. */
  field: string;
  /** What is wrong with it (`must be integer`, `is not a known field`). */
  reason: string;
}

/**
 * The first of ajv's `errors` as a {@link SchemaProblem}.
 *
 * The field is `at` followed by the error's `instancePath` (JSON pointer,
 * `~1`/`~0` unescaped), plus the property ajv names in `params` for
 * `required` (missingProperty), `additionalProperties` (additionalProperty)
 * and a discriminator (its tag), or the offending key of `propertyNames`.
 * Patterns listed in {@link PATTERN_MEANINGS} are explained instead of quoted.
 * A discriminator error lists the allowed tags only when ajv ran with
 * `verbose: true` (it needs the parent schema).
 *
 * @param errors - `validate.errors` after a failed validation; only the first is read.
 * @param at - dotted path of the validated value in the configuration (e.g. `tables.products`). Default: none.
 */
export function schemaProblem(
  errors: readonly ErrorObject[] | null | undefined,
  at = '',
): SchemaProblem {
  const error = errors?.[0];
  const path = [...(at === '' ? [] : [at]), ...pointerSegments(error?.instancePath ?? '')];
  const problem = (reason: string, ...more: string[]): SchemaProblem => ({
    field: [...path, ...more].join('.') || '(root)',
    reason,
  });
  if (error === undefined) return problem('is invalid');
  const { params } = error;
  if (error.propertyName !== undefined) {
    if (error.keyword === 'not') {
      const names = (error.schema as { enum?: unknown[] } | undefined)?.enum;
      return problem(
        `is a reserved name${names ? ` (${names.join(', ')})` : ''}`,
        error.propertyName,
      );
    }
    return problem(`is not a valid name (must match ${params.pattern})`, error.propertyName);
  }
  switch (error.keyword) {
    case 'required':
      return problem('is required', params.missingProperty);
    case 'additionalProperties':
      return problem('is not a known field', params.additionalProperty);
    case 'minProperties':
      return problem(
        params.limit === 1 ? 'must not be empty' : `must have at least ${params.limit} entries`,
      );
    case 'enum':
      return problem(`must be one of ${params.allowedValues.join(', ')}`);
    case 'const':
      return problem(`must be ${params.allowedValue}`);
    case 'pattern':
      return problem(PATTERN_MEANINGS.get(params.pattern) ?? `must match ${params.pattern}`);
    case 'discriminator': {
      const tags = discriminatorTags(error.parentSchema, params.tag);
      return problem(
        tags ? `must be one of ${tags.join(', ')}` : 'is not a known kind',
        params.tag,
      );
    }
    case 'type':
      if (params.type === 'object') return problem('must be a mapping of fields (an object)');
      return problem(error.message ?? 'has the wrong type');
    default:
      return problem(error.message ?? 'is invalid');
  }
}

/** The segments of a JSON pointer (RFC 6901), unescaped. */
function pointerSegments(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer
    .split('/')
    .slice(1)
    .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'));
}

/** The `const` of `tag` in each `oneOf` branch of a discriminated schema, when all have one. */
function discriminatorTags(parent: unknown, tag: string): string[] | undefined {
  const branches = (
    parent as { oneOf?: Array<{ properties?: Record<string, { const?: unknown }> }> }
  )?.oneOf;
  const tags = branches?.map((branch) => branch.properties?.[tag]?.const);
  if (tags === undefined || tags.some((t) => typeof t !== 'string')) return undefined;
  return tags as string[];
}
