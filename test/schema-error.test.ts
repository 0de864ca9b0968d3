import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { HEADER_VALUE_PATTERN } from '../src/config/schema.js';
import { schemaProblem } from '../src/config/schema-error.js';

const ajv = new Ajv({ strict: true, discriminator: true, verbose: true });

/** The problem `schemaProblem` reports for `value` against `schema`. */
function problemOf(schema: object, value: unknown, at?: string) {
  const validate = ajv.compile(schema);
  expect(validate(value)).toBe(false);
  return schemaProblem(validate.errors, at);
}

const policy = {
  type: 'object',
  additionalProperties: false,
  required: ['name'],
  properties: {
    name: { type: 'string' },
    ttlMs: { type: 'integer', minimum: 1 },
    mode: { enum: ['fleet', 'process'] },
    l1: {
      type: 'object',
      additionalProperties: false,
      properties: { 'max/entries': { type: 'integer' } },
    },
    header: { type: 'string', pattern: HEADER_VALUE_PATTERN },
  },
};

describe('schemaProblem', () => {
  it('names a nested field as a dotted path after the prefix', () => {
    expect(problemOf(policy, { name: 'a', ttlMs: 1.5 }, 'tables.t')).toEqual({
      field: 'tables.t.ttlMs',
      reason: 'must be integer',
    });
  });

  it('names an unknown field by its own name, unescaping the JSON pointer', () => {
    expect(problemOf(policy, { name: 'a', l1: { 'max/entries': 'x' } })).toEqual({
      field: 'l1.max/entries',
      reason: 'must be integer',
    });
    expect(problemOf(policy, { name: 'a', ttl: 1 }, 'tables.t')).toEqual({
      field: 'tables.t.ttl',
      reason: 'is not a known field',
    });
  });

  it('names a missing field', () => {
    expect(problemOf(policy, {})).toEqual({ field: 'name', reason: 'is required' });
  });

  it('lists the allowed values of an enum', () => {
    expect(problemOf(policy, { name: 'a', mode: 'none' }).reason).toBe(
      'must be one of fleet, process',
    );
  });

  it('explains a known pattern instead of quoting it', () => {
    expect(problemOf(policy, { name: 'a', header: 'a\r\nb' })).toEqual({
      field: 'header',
      reason: 'must not contain CR, LF or NUL',
    });
  });

  it('calls the whole value (root) and asks for a mapping', () => {
    expect(problemOf(policy, ['a'])).toEqual({
      field: '(root)',
      reason: 'must be a mapping of fields (an object)',
    });
  });

  it('names a reserved or malformed key of a map', () => {
    const map = {
      type: 'object',
      propertyNames: { pattern: '^[a-z]+$', not: { enum: ['constructor'] } },
    };
    expect(problemOf(map, { constructor: 1 }, 'tables')).toEqual({
      field: 'tables.constructor',
      reason: 'is a reserved name (constructor)',
    });
    expect(problemOf(map, { A: 1 }, 'tables')).toEqual({
      field: 'tables.A',
      reason: 'is not a valid name (must match ^[a-z]+$)',
    });
  });

  it('lists the kinds of a discriminated union', () => {
    const source = {
      type: 'object',
      discriminator: { propertyName: 'kind' },
      required: ['kind'],
      properties: { kind: { enum: ['sqlite', 'http'] } },
      oneOf: [
        { properties: { kind: { const: 'sqlite' } } },
        { properties: { kind: { const: 'http' } } },
      ],
    };
    expect(problemOf(source, { kind: 'ftp' }, 'source')).toEqual({
      field: 'source.kind',
      reason: 'must be one of sqlite, http',
    });
  });
});
