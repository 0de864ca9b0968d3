import { describe, expect, it } from 'vitest';
import * as errors from '../../src/errors.js';
import { publicMessage } from '../../src/http/errors.js';

const classes = Object.values(errors).filter(
  (x): x is typeof errors.EchoStoreError =>
    typeof x === 'function' && x.prototype instanceof errors.EchoStoreError,
);

describe('the error catalogue', () => {
  it('every class has its own stable ECC_ code and an HTTP status', () => {
    const codes = classes.map((c) => c.code);
    expect(codes.every((c) => /^ECC_[A-Z_]+$/.test(c))).toBe(true);
    // ECC_INTERNAL is the base's and InternalError's: every other code names one class.
    expect(new Set(codes.filter((c) => c !== 'ECC_INTERNAL')).size).toBe(
      codes.filter((c) => c !== 'ECC_INTERNAL').length,
    );
    for (const c of classes) expect(c.statusCode).toBeGreaterThanOrEqual(400);
  });

  it('a 5xx tells the client its class text, never its message or cause', () => {
    const e = new errors.LoadFailedError('ECONNREFUSED 10.0.0.7:5432 password=…', {
      cause: new Error('secret'),
    });
    expect(publicMessage(e)).toBe('the source failed to load the item');
  });

  it('a 4xx tells the client its own message', () => {
    expect(publicMessage(new errors.BadIdError('id must be printable'))).toBe(
      'id must be printable',
    );
  });

  it('ECC_VALKEY_UNAVAILABLE says "nothing was written" only when nothing was sent', () => {
    expect(publicMessage(new errors.ValkeyUnavailableError('x', { notSent: true }))).toBe(
      'the cache is unavailable; nothing was written',
    );
    expect(publicMessage(new errors.ValkeyUnavailableError('x', { notSent: false }))).toBe(
      'the cache did not confirm the write; it may or may not have been applied',
    );
  });

  it('ECC_SHED carries its retry hint', () => {
    expect(new errors.ShedError('x', { retryAfterMs: 2_500 }).retryAfterMs).toBe(2_500);
    expect(new errors.ShedError('x').retryAfterMs).toBe(1_000);
  });
});
