import { describe, expect, it } from 'vitest';
import { retryAfter } from '../../src/sources/http.js';

describe("an origin's Retry-After (RFC 9110 §10.2.3)", () => {
  const now = Date.parse('Tue, 01 Dec 2026 12:00:00 GMT');

  it('reads delay-seconds and an IMF-fixdate', () => {
    expect(retryAfter('30', now)).toBe(30_000);
    expect(retryAfter(' 7 ', now)).toBe(7_000);
    expect(retryAfter('Tue, 01 Dec 2026 12:00:20 GMT', now)).toBe(20_000);
    expect(retryAfter('Tue, 01 Dec 2026 11:00:00 GMT', now)).toBe(0);
  });

  it('takes anything else for garbage, not for a date Date.parse happens to accept', () => {
    for (const text of ['-5', '1.5', '3, 4', '1 2', 'Dec 2099', '1e3', '', 'garbage']) {
      expect(retryAfter(text, now), text).toBeUndefined();
    }
    expect(retryAfter(null, now)).toBeUndefined();
  });
});
