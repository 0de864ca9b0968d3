// Mutation testing (StrykerJS, vitest runner): `npm run mutation`. See docs/testing.md.
import { readFileSync } from 'node:fs';

/** The lines of `export function cacheStatus` in src/http/items.ts, found now so they cannot drift. */
function cacheStatusLines() {
  const lines = readFileSync(new URL('./src/http/items.ts', import.meta.url), 'utf8').split('\n');
  const start = lines.findIndex((l) => l.startsWith('export function cacheStatus')) + 1;
  const end = lines.findIndex((l, i) => i >= start && l === '}') + 1;
  if (start === 0 || end === 0) throw new Error('stryker.config.mjs: cacheStatus() not found');
  return `${start}-${end}`;
}

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutation.config.ts', related: false },
  mutate: [
    'src/l2/format.ts',
    'src/store/freshness.ts',
    'src/protection/admission.ts',
    'src/actor/messages.ts',
    'src/actor/mailbox.ts',
    'src/actor/owner.ts',
    'src/actor/writes.ts',
    'src/store/l1.ts',
    // cacheStatus() only: the routes are covered by test/http-api.test.ts, not by unit tests.
    `src/http/items.ts:${cacheStatusLines()}`,
  ],
  coverageAnalysis: 'perTest',
  // The machine is shared (2 cores): two workers at most.
  concurrency: 2,
  timeoutMS: 3_000,
  // Stryker rewrites tsconfig.json for the sandbox with the TypeScript 5 API, which TypeScript 7
  // no longer has. Our tsconfig has no `extends` or `references` to rewrite, so point it at none.
  tsconfigFile: 'no-tsconfig-to-rewrite.json',
  reporters: ['clear-text', 'progress', 'html', 'json'],
  htmlReporter: { fileName: 'reports/mutation/index.html' },
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  tempDirName: '.stryker-tmp',
};
