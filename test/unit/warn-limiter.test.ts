import { afterEach, describe, expect, it, vi } from 'vitest';
import { type WarnKey, WarnLimiter } from '../../src/warn-limiter.js';

describe('WarnLimiter: one warning per kind of failure per window, the repeats counted once', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  function limiter(windowMs = 10_000) {
    vi.useFakeTimers();
    const reports: Array<[WarnKey, number]> = [];
    const l = new WarnLimiter(
      (fields, repeats) => reports.push([fields, repeats]),
      windowMs,
      () => Date.now(),
    );
    return { l, reports };
  }
  const shed = { code: 'ECC_SHED', table: 't' };

  it('warns for the first answer of a window; the others are reported once, by count, when it closes', async () => {
    const { l, reports } = limiter();
    expect(l.take(shed)).toBe(true);
    for (let i = 0; i < 4; i++) expect(l.take(shed)).toBe(false);
    await vi.advanceTimersByTimeAsync(9_999);
    expect(reports).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    // Reported though no answer of that kind followed.
    expect(reports).toEqual([[shed, 4]]);
    expect(l.take(shed)).toBe(true);
  });

  it('reports nothing for a window without repeats', async () => {
    const { l, reports } = limiter();
    expect(l.take(shed)).toBe(true);
    await vi.advanceTimersByTimeAsync(30_000);
    expect(reports).toEqual([]);
    expect(l.take(shed)).toBe(true);
  });

  it('keeps one window per kind: another table, code or kind of cause is warned on its own', () => {
    const { l } = limiter();
    expect(l.take(shed)).toBe(true);
    expect(l.take({ ...shed, table: 'u' })).toBe(true);
    expect(l.take({ code: 'ECC_LOAD_FAILED', table: 't', causeKind: 'SourceError:500' })).toBe(
      true,
    );
    expect(l.take({ code: 'ECC_LOAD_FAILED', table: 't', causeKind: 'SourceError:200' })).toBe(
      true,
    );
    expect(l.take(shed)).toBe(false);
  });

  it('forgets quiet kinds once it holds many, so it cannot grow without bound', () => {
    const { l } = limiter(10);
    for (let i = 0; i < 1_001; i++) l.take({ code: 'ECC_SHED', table: `t${i}` });
    vi.advanceTimersByTime(20);
    expect(l.take({ code: 'ECC_SHED', table: 'new' })).toBe(true);
    expect(l.take({ code: 'ECC_SHED', table: 't0' })).toBe(true);
  });
});
