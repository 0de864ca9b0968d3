/**
 * The contract every source kind keeps (bentocache's shared driver suite, for
 * sources): found, not found, failure, abort, close. A kind's test file calls
 * {@link describeSource} with a factory; each test builds a fresh source.
 */
import { describe, expect, it, vi } from 'vitest';
import type { Source } from '../../src/sources/index.js';
import { errorOf, openStore } from './probe.js';
import { uniqueTable } from './store.js';

/** One source under test, and what the contract needs to know about it. */
export interface SourceUnderTest {
  source: Source;
  /** An id the source has, and the value it loads for it. */
  found: { id: string; value: unknown };
  /** An id the source does not have. */
  missing: string;
  /** An id whose load fails. */
  failing: string;
  /**
   * An id whose load does not finish by itself, and a promise settled once
   * such a load has begun (reached the origin). Absent for a kind whose load
   * runs synchronously (sqlite): it has nothing in flight to abort.
   */
  slow?: { id: string; started(): Promise<void> };
  /** What the source holds open now: file descriptors, connections, timers. */
  openHandles(): number | Promise<number>;
}

/** How long an aborted or closed load may take to reject: "promptly", against a load that never ends. */
const PROMPT_MS = 1_000;

const signal = () => new AbortController().signal;

/** What `load` fails with; fails the test if it throws synchronously or resolves. */
async function failureOf(load: () => unknown): Promise<unknown> {
  let pending: unknown;
  expect(() => {
    pending = load();
  }, 'a failing load rejects; it does not throw synchronously').not.toThrow();
  return (pending as Promise<unknown>).then(
    () => expect.fail('expected the load to reject'),
    (err: unknown) => err,
  );
}

/** Registers the source contract for `kind`; `make` builds a fresh source (and its origin) per test. */
export function describeSource(
  kind: string,
  make: () => SourceUnderTest | Promise<SourceUnderTest>,
): void {
  describe(`${kind} source contract`, () => {
    it('loads an item it has', async () => {
      const s = await make();
      expect(await s.source.load(s.found.id, { signal: signal() })).toEqual(s.found.value);
      s.source.close();
    });

    it('answers undefined for an item it does not have (not found)', async () => {
      const s = await make();
      expect(await s.source.load(s.missing, { signal: signal() })).toBeUndefined();
      s.source.close();
    });

    it('rejects when a load fails', async () => {
      const s = await make();
      const err = await failureOf(() => s.source.load(s.failing, { signal: signal() }));
      expect(err).toBeInstanceOf(Error);
      s.source.close();
    });

    it('through a store: found is a value, not found is found: false, a failure is ECC_LOAD_FAILED carrying it', async () => {
      const s = await make();
      const failures: unknown[] = [];
      const table = uniqueTable(`contract-${kind}`);
      const store = await openStore({
        [table]: {
          // Failures not remembered (remembered-failures.test.ts covers errorTtlMs).
          errorTtlMs: 0,
          load: (id, ctx) =>
            (s.source.load(id, ctx) as Promise<unknown>).catch((err: unknown) => {
              failures.push(err);
              throw err;
            }),
        },
      });
      const t = store.table(table);
      const found = await t.get(s.found.id);
      expect(found.found && found.value).toEqual(s.found.value);
      expect((await t.get(s.missing)).found).toBe(false);
      const err = await errorOf(t.get(s.failing));
      expect(err.code).toBe('ECC_LOAD_FAILED');
      expect(err.cause).toBe(failures[0]);
      // A failure is not cached as a value: with errorTtlMs 0 the next read asks the source again.
      expect((await errorOf(t.get(s.failing))).code).toBe('ECC_LOAD_FAILED');
      expect(failures).toHaveLength(2);
      await store.close();
      s.source.close();
    });

    it('honours a signal aborted before the load: rejects with its reason', async () => {
      const s = await make();
      const controller = new AbortController();
      const reason = new Error('flight cancelled');
      controller.abort(reason);
      const err = await failureOf(() => s.source.load(s.found.id, { signal: controller.signal }));
      expect(err).toBe(reason);
      s.source.close();
    });

    it('a load in flight aborted by its signal rejects promptly with the reason (a kind with no slow load has none in flight)', async () => {
      const s = await make();
      if (s.slow === undefined) {
        // Nothing in flight to abort (sqlite's loads run synchronously): its load has
        // settled before the next turn of the event loop.
        let settled = false;
        const loading = Promise.resolve(s.source.load(s.found.id, { signal: signal() })).finally(
          () => {
            settled = true;
          },
        );
        await new Promise((r) => setImmediate(r));
        expect(settled).toBe(true);
        expect(await loading).toEqual(s.found.value);
        s.source.close();
        return;
      }
      const controller = new AbortController();
      const reason = new Error('flight cancelled');
      const loading = failureOf(() =>
        s.source.load(s.slow?.id ?? '', { signal: controller.signal }),
      );
      await s.slow.started();
      const abortedAt = performance.now();
      controller.abort(reason);
      expect(await loading).toBe(reason);
      expect(performance.now() - abortedAt).toBeLessThan(PROMPT_MS);
      s.source.close();
    });

    it('close leaves no handle open, settles a load in flight, and a second close is harmless', async () => {
      const s = await make();
      await s.source.load(s.found.id, { signal: signal() });
      const inFlight =
        s.slow === undefined
          ? undefined
          : failureOf(() => s.source.load(s.slow?.id ?? '', { signal: signal() }));
      await s.slow?.started();
      expect(await s.openHandles()).toBeGreaterThan(0);
      const closedAt = performance.now();
      s.source.close();
      if (inFlight !== undefined) {
        expect(await inFlight).toBeInstanceOf(Error);
        expect(performance.now() - closedAt).toBeLessThan(PROMPT_MS);
      }
      await vi.waitFor(async () => expect(await s.openHandles()).toBe(0));
      expect(() => s.source.close()).not.toThrow();
    });
  });
}
