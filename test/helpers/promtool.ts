/**
 * Whether promtool (Debian's prometheus package) can run the checks that need it. Under CI
 * (`.ci/run` installs it) a missing promtool fails the test; elsewhere the test is skipped,
 * loudly, with the reason.
 */
import { execFileSync } from 'node:child_process';
import { expect, type TestContext } from 'vitest';

export function requirePromtool(ctx: TestContext, file: string): void {
  try {
    execFileSync('promtool', ['--version'], { stdio: 'ignore' });
    return;
  } catch {
    const reason = 'promtool is not on the PATH (apt-get install -y prometheus)';
    if (process.env.CI) expect.fail(reason);
    process.stderr.write(`${file}: SKIPPED: ${reason}\n`);
    ctx.skip(reason);
  }
}
