// Mutation testing (StrykerJS, vitest runner): `npm run mutation`. See docs/testing.md.
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutation.config.ts', related: false },
  mutate: [
    'src/store/envelope.ts',
    'src/store/freshness.ts',
    'src/store/admission.ts',
    'src/store/messages.ts',
    'src/store/owner.ts',
    'src/store/writes.ts',
    'src/store/l1.ts',
    // cacheStatus() only: the routes are covered by test/http-api.test.ts, not by unit tests.
    'src/http/items.ts:112-127',
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
