/** Small helpers shared by drills: percentiles and a plain-text table. */

/** The p-th percentile (0–100) of `samples` by nearest rank; NaN when empty. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

/** Renders rows of label/value pairs as an aligned two-column table. */
export function table(rows: Array<[string, string | number]>): string {
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`).join('\n');
}
