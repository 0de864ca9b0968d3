/** Command-line handling shared by the drills: options, and the `--json [file]` report. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { type ParseArgsConfig, parseArgs } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * Parses the drill's options (strict: an unknown option exits 2 with a one-line message), plus
 * `--json [file]`: a bare `--json` means "JSON to stdout" (`'-'`), `--json
 * <file>` writes the file as well as the table.
 */
export function drillArgs<const O extends Options>(
  options: O,
): { [K in keyof O]: O[K] extends { default: string } ? string : string | undefined } & {
  json: string | undefined;
} {
  const args = process.argv
    .slice(2)
    .map((a, i, all) =>
      a === '--json' && (i === all.length - 1 || all[i + 1]?.startsWith('--')) ? '--json=-' : a,
    );
  const all = { ...options, json: { type: 'string' } } as O & { json: { type: 'string' } };
  try {
    const { values } = parseArgs({ args, options: all, strict: true, allowNegative: false });
    return values as unknown as ReturnType<typeof drillArgs<O>>;
  } catch (err) {
    // A usage mistake: say so in one line and exit 2 ("the drill could not run").
    const known = Object.keys(all)
      .map((k) => `--${k}`)
      .join(' ');
    process.stderr.write(`${(err as Error).message}\noptions: ${known}\n`);
    process.exit(2);
  }
}

/**
 * Writes `report` as `--json` asked: pretty to a file (creating its folder),
 * or one line to stdout for `'-'`.
 *
 * @returns true when the report went to stdout (so the table should not).
 */
export function emitJson(json: string | undefined, report: unknown): boolean {
  if (json === undefined) return false;
  if (json === '-') {
    process.stdout.write(`${JSON.stringify(report)}\n`);
    return true;
  }
  mkdirSync(dirname(json), { recursive: true });
  writeFileSync(json, `${JSON.stringify(report, null, 2)}\n`);
  return false;
}
