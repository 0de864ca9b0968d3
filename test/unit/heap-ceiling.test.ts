/**
 * The start-up check of V8's heap ceiling against the configured L1s
 * (`heap-ceiling.ts`): twice the rows' bytes plus the base, and a verdict.
 */
import { getHeapStatistics } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { HEAP_BASE_BYTES, heapNeededBytes, heapRoom } from '../../src/heap-ceiling.js';

const MiB = 1024 * 1024;

describe('heap ceiling', () => {
  it('needs the base plus twice every L1 maxBytes', () => {
    expect(heapNeededBytes([])).toBe(HEAP_BASE_BYTES);
    expect(heapNeededBytes([64 * MiB, 32 * MiB])).toBe(HEAP_BASE_BYTES + 192 * MiB);
  });

  it("the service's 512 MiB ceiling covers three tables' default L1 (64 MiB), not four", () => {
    const ceiling = 512 * MiB;
    expect(heapRoom([64 * MiB, 64 * MiB, 64 * MiB], ceiling).enough).toBe(true);
    const four = heapRoom(Array(4).fill(64 * MiB), ceiling);
    expect(four).toEqual({
      neededBytes: HEAP_BASE_BYTES + 512 * MiB,
      ceilingBytes: ceiling,
      enough: false,
    });
  });

  it("reads this process's ceiling by default", () => {
    expect(heapRoom([]).ceilingBytes).toBe(getHeapStatistics().heap_size_limit);
  });
});
