import { describe, expect, it } from 'vitest';
import { WarnLimiter } from '../../src/http/errors.js';

describe('WarnLimiter: one warning per code and table per window', () => {
  function limiter(windowMs = 10_000) {
    let now = 5_000;
    return {
      l: new WarnLimiter(windowMs, () => now),
      advance(ms: number) {
        now += ms;
      },
    };
  }

  it('warns for the first answer of a window, counts the others, and reports them with the next warning', () => {
    const t = limiter();
    expect(t.l.take('ECC_SHED t')).toEqual({ warn: true, repeats: 0 });
    for (let i = 0; i < 3; i++) expect(t.l.take('ECC_SHED t').warn).toBe(false);
    t.advance(9_999);
    expect(t.l.take('ECC_SHED t').warn).toBe(false);
    t.advance(1);
    expect(t.l.take('ECC_SHED t')).toEqual({ warn: true, repeats: 4 });
    t.advance(60_000);
    expect(t.l.take('ECC_SHED t')).toEqual({ warn: true, repeats: 0 });
  });

  it('keeps one window per key: one table shedding hides no other table, nor another code', () => {
    const t = limiter();
    expect(t.l.take('ECC_SHED a').warn).toBe(true);
    expect(t.l.take('ECC_SHED b').warn).toBe(true);
    expect(t.l.take('ECC_LOAD_FAILED a').warn).toBe(true);
    expect(t.l.take('ECC_SHED a').warn).toBe(false);
  });

  it('forgets quiet keys once it holds many, so a stream of distinct tables cannot grow it without bound', () => {
    const t = limiter(10);
    for (let i = 0; i < 1_001; i++) t.l.take(`ECC_SHED t${i}`);
    t.advance(20);
    expect(t.l.take('ECC_SHED new')).toEqual({ warn: true, repeats: 0 });
    // The old keys were dropped: their next answer warns as a first one.
    expect(t.l.take('ECC_SHED t0')).toEqual({ warn: true, repeats: 0 });
  });
});
