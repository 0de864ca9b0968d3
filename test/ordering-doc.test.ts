/**
 * docs/ordering.md names, for each race, the test that fails when its
 * defence is deleted. Those names must stay the names of tests: renaming or
 * deleting a test without the doc fails here.
 */
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const DOC = 'docs/ordering.md';

/** The titles of the `it(…)` calls of a test file. */
function testTitles(path: string): string[] {
  if (!existsSync(path)) return [];
  const text = readFileSync(path, 'utf8');
  return [...text.matchAll(/\bit\(\s*(['"`])((?:\\.|(?!\1).)*)\1/gs)].map((m) =>
    (m[2] as string).replace(/\\(.)/g, '$1'),
  );
}

/**
 * Every `` `file` › title… `` reference of the doc's tables: the file (`unit/x` is
 * `test/unit/x.test.ts`) and the part of the title it quotes (up to an ellipsis or a
 * remark in parentheses; one that starts with an ellipsis quotes the middle of the title).
 */
function references(doc: string): Array<{ file: string; fragment: string }> {
  const rows = doc.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| -'));
  return rows.flatMap((row) =>
    [...row.matchAll(/`([\w/-]+)` › ([^;|]+)/g)].map((m) => ({
      file: `test/${m[1]}.test.ts`,
      fragment: (m[2] as string)
        .trim()
        .replace(/^…\s*/, '')
        .replace(/….*$/, '')
        // A remark after the title: "title (control: …)", "title (neutralised: …)".
        .replace(/\s*\([^()]*:[^()]*\)?$/, '')
        .trim(),
    })),
  );
}

describe('docs/ordering.md', () => {
  it('names, in every row, tests that exist', () => {
    const refs = references(readFileSync(DOC, 'utf8'));
    expect(refs.length).toBeGreaterThan(30);
    const missing = refs
      .filter(({ file, fragment }) => !testTitles(file).some((title) => title.includes(fragment)))
      .map(({ file, fragment }) => `${file}: ${fragment}`);
    expect(missing).toEqual([]);
  });

  it('names only drills that exist', () => {
    const scripts = Object.keys(
      (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> })
        .scripts,
    );
    const drills = [...readFileSync(DOC, 'utf8').matchAll(/`(drill:[\w-]+)`/g)].map((m) => m[1]);
    expect(drills.length).toBeGreaterThan(0);
    expect(drills.filter((d) => !scripts.includes(d as string))).toEqual([]);
  });

  it('names a test or a drill for every race in its tables', () => {
    const doc = readFileSync(DOC, 'utf8');
    const raceRows = doc
      .split('\n')
      .filter((l) => l.startsWith('| ') && !l.startsWith('| -') && !l.startsWith('| race'))
      .filter((l) => l.split('|').length === 5);
    expect(raceRows.length).toBeGreaterThan(20);
    for (const row of raceRows)
      expect(row, row.slice(0, 80)).toMatch(/`[\w/-]+` › |`drill:[\w-]+`/);
  });
});
