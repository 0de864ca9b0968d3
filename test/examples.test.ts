import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { valkeyUrl } from './helpers/store.js';

const EXAMPLES = fileURLToPath(new URL('../examples/', import.meta.url));
const run = promisify(execFile);

/** Every runnable file of examples/ (ESM and CommonJS), as a user would run it, on the built package. */
describe('examples/', () => {
  const files = readdirSync(EXAMPLES).filter((f) => /\.(mjs|cjs)$/.test(f));

  it('has the library, CommonJS and built-in source examples', () => {
    expect(files).toEqual(
      expect.arrayContaining(['library.mjs', 'commonjs.cjs', 'sqlite-source.mjs']),
    );
  });

  it.each(files)('%s runs to its end and prints ok', async (file) => {
    const { stdout } = await run(process.execPath, [file], {
      cwd: EXAMPLES,
      env: { ...process.env, VALKEY_URL: valkeyUrl() },
      timeout: 30_000,
    });
    expect(stdout.trimEnd().split('\n').at(-1)).toBe('ok');
  });
});
