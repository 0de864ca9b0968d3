import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/** The files `npm pack` would put in the tarball (run after `npm run build`, as `pretest` does). */
function packed(): string[] {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const [pack] = JSON.parse(out) as Array<{ files: Array<{ path: string }> }>;
  return (pack?.files ?? []).map((f) => f.path);
}

describe('the package', () => {
  it('ships the built src/ only: no test, drill, bench, harness or script file', () => {
    const files = packed();
    expect(files).toContain('dist/src/main.js');
    expect(files).toContain('dist/src/index.d.ts');
    const tools = /(^|\/)(test|drills|bench|harness|scripts)\//;
    expect(files.filter((f) => tools.test(f))).toEqual([]);
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
  });

  it('points main, types and exports at files it ships', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as {
      main: string;
      types: string;
      exports: { '.': { types: string; default: string } };
    };
    const files = new Set(packed());
    for (const f of [pkg.main, pkg.types, pkg.exports['.'].types, pkg.exports['.'].default]) {
      expect(files, f).toContain(f.replace(/^\.\//, ''));
    }
  });

  it("starts the service with npm start's V8 flags in the Dockerfile too", () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: { start: string } };
    const start = pkg.scripts.start.replace(/\$\{ECHOSTORE_HEAP_MIB:-(\d+)\}/g, '$1');
    const npmFlags = start.split(/\s+/).filter((w) => w.startsWith('--'));
    const cmd = /^CMD (\[.*\])$/m.exec(readFileSync('Dockerfile', 'utf8'))?.[1];
    const dockerFlags = (JSON.parse(cmd ?? '[]') as string[]).filter((w) => w.startsWith('--'));
    expect(npmFlags.length).toBeGreaterThan(0);
    expect(dockerFlags).toEqual(npmFlags);
  });
});
