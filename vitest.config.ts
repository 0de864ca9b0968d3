import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    testTimeout: 20_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // The test files mostly wait on servers and child processes they start: two run at once
    // even on two cores (vitest's default there is one).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // `// @module-tag cluster` at the top of a file: `npm run test:cluster` runs it on a cluster.
    tags: [{ name: 'cluster', description: 'a law test, run again on a local 3+3 cluster' }],
  },
});
