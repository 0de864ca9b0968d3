/** What the drills' and benches' reports are made of: percentiles, tallies, laws, one table renderer. */
import { cpus } from 'node:os';

/** The p-th percentile (0–100) of `samples` by nearest rank; NaN when empty. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

/** The median of `samples` by nearest rank (the lower middle one of an even count); NaN when empty. */
export const median = (samples: number[]): number => percentile(samples, 50);

/** `x` rounded to `digits` decimals, as a number. */
export const round = (x: number, digits = 2): number => Number(x.toFixed(digits));

/** The median and the 99th percentile of `samplesMs`, rounded to `digits` decimals. */
export const p50p99 = (samplesMs: number[], digits = 2) => ({
  p50Ms: round(percentile(samplesMs, 50), digits),
  p99Ms: round(percentile(samplesMs, 99), digits),
});

/** The `ms` of each of `xs`. */
export const msOf = (xs: ReadonlyArray<{ ms: number }>): number[] => xs.map((x) => x.ms);

/** The largest of `ms`, rounded; 0 when empty. */
export const maxMs = (ms: number[]): number => Math.round(ms.reduce((m, x) => Math.max(m, x), 0));

/** The sum of `f` over `xs`. */
export const sum = <T>(xs: readonly T[], f: (x: T) => number): number =>
  xs.reduce((n, x) => n + f(x), 0);

/** Adds `n` to `counts[key]`. */
export function bump(counts: Record<string, number>, key: string, n = 1): void {
  counts[key] = (counts[key] ?? 0) + n;
}

/** Adds every count of `from` into `into`; returns `into`. */
export function addCounts(into: Record<string, number>, from: Record<string, number>) {
  for (const [k, n] of Object.entries(from)) bump(into, k, n);
  return into;
}

/** `xs` counted by `key` (undefined: not counted). */
export function countBy<T>(xs: readonly T[], key: (x: T) => string | undefined) {
  const counts: Record<string, number> = {};
  for (const x of xs) {
    const k = key(x);
    if (k !== undefined) bump(counts, k);
  }
  return counts;
}

/** `a×3, b×1` in key order; `empty` when there is nothing to list. */
export function listCounts(c: Record<string, number>, empty = '0'): string {
  const parts = Object.entries(c)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, n]) => `${k}×${n}`);
  return parts.length === 0 ? empty : parts.join(', ');
}

/** One judged law: its name, whether it holds, and what was seen. */
export interface Check {
  name: string;
  pass: boolean;
  detail: string;
}

/** A check: `PASS: <name> — <detail>`. */
export const check = (name: string, pass: boolean, detail: string): Check => ({
  name,
  pass,
  detail,
});

/** `name` judged on `seen` against the law `want` (by default: equal to it): `… — seen (law: want)`. */
export const law = (name: string, seen: unknown, want: unknown, pass = seen === want): Check =>
  check(name, pass, `${seen} (law: ${want})`);

/** A bench's verdict on a target: `met`, else `GAP`. */
export const met = (ok: boolean): string => (ok ? 'met' : 'GAP');

/** `PASS` when `pass`, else `FAIL`. */
export const verdict = (pass: boolean): string => (pass ? 'PASS' : 'FAIL');

/**
 * Renders `rows` as aligned columns, each line indented two spaces. With a
 * `header`: a header row and a rule, cells separated by ` | `, numbers
 * right-aligned; without: label/value lines, cells separated by two spaces.
 */
export function columns(rows: Array<Array<string | number>>, header?: string[]): string {
  const all = header === undefined ? rows : [header, ...rows];
  const widths = (all[0] ?? []).map((_, i) => Math.max(...all.map((r) => String(r[i]).length)));
  const pad = (c: string | number, i: number) =>
    typeof c === 'number' && header !== undefined
      ? String(c).padStart(widths[i] as number)
      : String(c).padEnd(widths[i] as number);
  const sep = header === undefined ? '  ' : ' | ';
  const line = (cells: Array<string | number>) => `  ${cells.map(pad).join(sep)}`.trimEnd();
  if (header === undefined) return rows.map(line).join('\n');
  const rule = `  ${widths.map((w) => '-'.repeat(w)).join('-+-')}`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}

/**
 * Runs `op` in batches of 1 000, each awaited, for `ms` milliseconds: operations per second of
 * this process's CPU time (on a machine shared with other work the wall clock also counts the
 * time others held the cores, which moves one round's figure by a factor of two or three).
 */
export async function opsPerCpuSecond(ms: number, op: (i: number) => unknown): Promise<number> {
  let n = 0;
  const end = performance.now() + ms;
  const cpu = process.cpuUsage();
  while (performance.now() < end) for (let i = 0; i < 1_000; i++) await op(n++);
  const used = process.cpuUsage(cpu);
  return n / ((used.user + used.system) / 1e6);
}

/** `machine: 2 × <cpu model>, node v20…, linux`: the line a bench prints under its title. */
export const machineLine = (): string =>
  `machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, node ${process.version}, ${process.platform}`;
