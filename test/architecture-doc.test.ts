/**
 * The docs name the code: docs/architecture.md lists every file under src/ and
 * follows one cold GET by file and name, and any doc's `src/…`, `test/…` or
 * tool path names a file that exists. Each fails when the code moves.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ARCHITECTURE = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');

function filesUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile())
    .map((e) => relative(ROOT, join(e.parentPath, e.name)));
}

/** The rows of the markdown table that follows `heading`. */
function tableAfter(doc: string, heading: string): string[][] {
  const at = doc.indexOf(heading);
  expect(at, `heading ${heading}`).toBeGreaterThanOrEqual(0);
  const rows: string[][] = [];
  let inTable = false;
  for (const line of doc.slice(at).split('\n').slice(1)) {
    if (line.startsWith('|')) {
      inTable = true;
      rows.push(
        line
          .split('|')
          .slice(1, -1)
          .map((c) => c.trim()),
      );
    } else if (inTable) break;
  }
  return rows.slice(2); // header and rule
}

const unquote = (cell: string | undefined) => (cell ?? '').replace(/^`|`$/g, '');

describe('docs/architecture.md', () => {
  it('names every file under src/', () => {
    const unnamed = filesUnder('src').filter((f) => !ARCHITECTURE.includes(`\`${f}\``));
    expect(unnamed).toEqual([]);
  });

  it('follows a cold GET through names that are defined in the files it gives', () => {
    const steps = tableAfter(ARCHITECTURE, '## One cold GET, file by file');
    expect(steps.length).toBeGreaterThan(10);
    const missing = steps.filter(([, file, name]) => {
      const path = unquote(file);
      const symbol = unquote(name);
      if (!existsSync(join(ROOT, path))) return true;
      const text = readFileSync(join(ROOT, path), 'utf8');
      const escaped = symbol.replace(/[#$]/g, '\\$&');
      // A definition: a function, a method, a const, or a parameter of that name.
      return !new RegExp(
        `(function\\s+${escaped}\\b|^\\s*(async\\s+)?${escaped}\\s*[(<]|const\\s+${escaped}\\b|[(,]\\s*${escaped}\\s*:)`,
        'm',
      ).test(text);
    });
    expect(missing).toEqual([]);
  });

  it('includes both ways back to the owner: serveStale and landed', () => {
    const steps = tableAfter(ARCHITECTURE, '## One cold GET, file by file').map((r) => r[3] ?? '');
    expect(steps.some((s) => s.startsWith('way back 1'))).toBe(true);
    expect(steps.some((s) => s.startsWith('way back 2'))).toBe(true);
  });
});

describe('every doc', () => {
  const docs = ['README.md', 'CHANGELOG.md', 'drills/README.md', ...filesUnder('docs')].filter(
    (f) => f.endsWith('.md'),
  );
  const PATH = /`((?:src|test|drills|bench|harness|scripts|docs|deploy|config)\/[\w./-]+\.\w+)`/g;

  it.each(docs)('%s names only files that exist', (doc) => {
    const text = readFileSync(join(ROOT, doc), 'utf8');
    const absent = [...text.matchAll(PATH)]
      .map((m) => m[1] as string)
      // drills/out/ holds what a drill writes when asked (git-ignored).
      .filter(
        (p) => !p.includes('*') && !p.startsWith('drills/out/') && !existsSync(join(ROOT, p)),
      );
    expect(absent).toEqual([]);
  });
});

describe('docs/testing.md', () => {
  it('names every test file in its table of test files', () => {
    const rows = tableAfter(readFileSync(join(ROOT, 'docs/testing.md'), 'utf8'), '## Test files');
    const named = new Set(rows.map((r) => unquote(r[0])));
    const files = readdirSync(join(ROOT, 'test'))
      .filter((f) => f.endsWith('.test.ts'))
      .map((f) => f.replace(/\.test\.ts$/, ''));
    expect(files.filter((f) => !named.has(f))).toEqual([]);
  });
});
