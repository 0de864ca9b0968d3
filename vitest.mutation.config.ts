import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

/** The tests Stryker runs against each mutant (`npm run mutation`): the unit tests only. */
export default defineConfig({
  ...base,
  test: { ...base.test, include: ['test/unit/**/*.test.ts'] },
});
