/** A plain-text table with a header row, for drills that compare several runs. */

/**
 * Renders `rows` under `header` as aligned columns separated by ` | `; text
 * columns are left-aligned, numbers right-aligned.
 */
export function columns(header: string[], rows: Array<Array<string | number>>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells: Array<string | number>) =>
    `  ${cells
      .map((c, i) =>
        typeof c === 'number'
          ? String(c).padStart(widths[i] as number)
          : c.padEnd(widths[i] as number),
      )
      .join(' | ')
      .trimEnd()}`;
  const rule = `  ${widths.map((w) => '-'.repeat(w)).join('-+-')}`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}
