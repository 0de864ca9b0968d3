/** The purge epochs an instance holds: how a row is judged, and when they are read again. */
import { describe, expect, it } from 'vitest';
import { Epochs, HARD_PURGED, NOT_PURGED, SOFT_PURGED } from '../../src/store/epochs.js';
import { deferred } from '../helpers/store.js';

const none = async () => ({});

describe('judging a row by the epochs held', () => {
  it('nothing is purged before any purge, not even a row born at 0', () => {
    const e = new Epochs(none);
    expect(e.judge(0, undefined)).toBe(NOT_PURGED);
    expect(e.judge(0, ['a'])).toBe(NOT_PURGED);
  });

  it('a row born at or before an epoch of one of its tags is purged; after it, or untagged, not', () => {
    const e = new Epochs(none);
    e.apply({ epoch: 100, soft: false, tags: ['a'] });
    expect(e.judge(100, ['b', 'a'])).toBe(HARD_PURGED);
    expect(e.judge(99, ['a'])).toBe(HARD_PURGED);
    expect(e.judge(101, ['a'])).toBe(NOT_PURGED);
    expect(e.judge(50, ['b'])).toBe(NOT_PURGED);
    expect(e.judge(50, undefined)).toBe(NOT_PURGED);
  });

  it('a table epoch covers every row; hard wins over soft', () => {
    const e = new Epochs(none);
    e.apply({ epoch: 100, soft: true, tags: undefined });
    expect(e.judge(90, undefined)).toBe(SOFT_PURGED);
    e.apply({ epoch: 80, soft: false, tags: ['a'] });
    expect(e.judge(70, ['a'])).toBe(HARD_PURGED);
    expect(e.judge(90, ['a'])).toBe(SOFT_PURGED);
    e.apply({ epoch: 95, soft: false, tags: undefined });
    expect(e.judge(90, ['z'])).toBe(HARD_PURGED);
  });

  it('epochs only grow: an older purge arriving late changes nothing', () => {
    const e = new Epochs(none);
    e.apply({ epoch: 200, soft: false, tags: ['a'] });
    e.apply({ epoch: 100, soft: false, tags: ['a'] });
    expect(e.judge(150, ['a'])).toBe(HARD_PURGED);
    expect(e.newest).toBe(200);
  });
});

describe('reading the epochs', () => {
  it('reads once for every caller that asks meanwhile, and merges what is stored', async () => {
    let reads = 0;
    const gate = deferred<Record<string, string>>();
    const e = new Epochs(() => {
      reads++;
      return gate.promise;
    });
    const both = Promise.all([e.ensure(), e.ensure()]);
    gate.resolve({ Ha: '100', S: '50', Hb: 'garbage', X: '7' });
    await both;
    expect(reads).toBe(1);
    expect(e.judge(100, ['a'])).toBe(HARD_PURGED);
    expect(e.judge(40, undefined)).toBe(SOFT_PURGED);
    expect(e.judge(1, ['b'])).toBe(SOFT_PURGED);
    // Proven: nothing to wait for (no await, so a batch's commands leave in one tick).
    expect(e.ensure()).toBeUndefined();
    expect(reads).toBe(1);
  });

  it('after unprove (a reconnect) the next ensure reads again, even while an older reading runs', async () => {
    const answers = [deferred<Record<string, string>>(), deferred<Record<string, string>>()];
    let reads = 0;
    const e = new Epochs(
      () => (answers[reads++] as ReturnType<typeof deferred<Record<string, string>>>).promise,
    );
    const first = e.ensure();
    e.unprove();
    const second = e.ensure();
    expect(reads).toBe(2);
    answers[0]?.resolve({});
    answers[1]?.resolve({ Ht: '9' });
    await Promise.all([first, second]);
    expect(e.judge(9, ['t'])).toBe(HARD_PURGED);
  });

  it('a failed reading leaves the epochs unproven: the next ensure tries again', async () => {
    let reads = 0;
    const e = new Epochs(async () => {
      reads++;
      if (reads === 1) throw new Error('valkey is down');
      return {};
    });
    await expect(e.ensure() as Promise<void>).rejects.toThrow();
    await e.ensure();
    expect(reads).toBe(2);
  });

  it('without events (coherence off) a reading is proven for maxAgeMs only', async () => {
    let now = 0;
    let reads = 0;
    const e = new Epochs(
      async () => {
        reads++;
        return {};
      },
      1_000,
      () => now,
    );
    await e.ensure();
    now = 999;
    await e.ensure();
    expect(reads).toBe(1);
    now = 1_000;
    await e.ensure();
    expect(reads).toBe(2);
  });
});
