/** A drill's command line (typed options, `--json [file]` always among them) and its ending ({@link runDrill}). */
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { type Check, columns, verdict } from './report.js';
// Every drill and bench reaps the servers and services it spawns, however it exits.
import './reaper.js';

/** One option: a number within bounds, one of some words, free text, or a flag (no value). */
type Option =
  | { kind: 'int' | 'float'; default: number; min: number; max: number }
  | { kind: 'oneOf'; default: string; choices: readonly string[] }
  | { kind: 'text'; default: string }
  | { kind: 'list'; default: string; choices: readonly string[] }
  | { kind: 'flag' };

type Values<O extends Record<string, Option>> = {
  [K in keyof O]: O[K] extends { kind: 'list' }
    ? string[]
    : O[K] extends { choices: readonly (infer C)[] }
      ? C
      : O[K] extends { kind: 'text' }
        ? string
        : O[K] extends { kind: 'flag' }
          ? boolean
          : number;
} & { json: string | undefined };

/** An integer (`int`) or a number (`float`) option from `min` to `max`. */
export const int = (dflt: number, min: number, max = Number.POSITIVE_INFINITY) =>
  ({ kind: 'int', default: dflt, min, max }) as const;
export const float = (dflt: number, min: number, max = Number.POSITIVE_INFINITY) =>
  ({ kind: 'float', default: dflt, min, max }) as const;

/** One of `choices`; the first is the default. */
export const oneOf = <const C extends readonly string[]>(...choices: C) =>
  ({ kind: 'oneOf', default: choices[0] as string, choices }) as const;

/** Free text. */
export const text = (dflt: string) => ({ kind: 'text', default: dflt }) as const;

/** A comma-separated list of some of `choices` (`--only http,tags`); default all of them. */
export const listOf = <const C extends readonly string[]>(...choices: C) =>
  ({ kind: 'list', default: choices.join(','), choices }) as const;

/** A flag: true when given (`--cluster`), false otherwise; it takes no value. */
export const flag = () => ({ kind: 'flag' }) as const;

/** `--valkey`: the Valkey/Redis the drill uses, default `VALKEY_URL` or redis://127.0.0.1:6379. */
export const valkeyOption = () => text(process.env.VALKEY_URL ?? 'redis://127.0.0.1:6379');

/** `--valkey`, `--cluster` and `--secure` (with `--cluster`): the options of `drillValkey`. */
export const fleetOptions = () => ({ valkey: valkeyOption(), cluster: flag(), secure: flag() });

/** A usage mistake or a set-up that cannot work: `message` on one line of stderr, exit code 2. */
export function usage(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

/**
 * Parses the drill's options, plus `--json [file]`: a bare `--json` means
 * "JSON to stdout" (`'-'`), `--json <file>` writes the file as well as the
 * table; with `jsonFileOnly` (a bench that prints its text as it goes) a bare
 * `--json` is refused. A usage mistake (an unknown option, a number out of
 * bounds, a word not among the choices) exits 2 with a one-line message;
 * `--help` (`-h`) prints the options with their defaults and exits 0.
 */
export function drillArgs<const O extends Record<string, Option>>(
  options: O,
  { jsonFileOnly = false } = {},
): Values<O> {
  const args = process.argv
    .slice(2)
    .map((a, i, all) => (a === '--json' && (all[i + 1] ?? '--').startsWith('--') ? '--json=-' : a));
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(help(options, jsonFileOnly));
    process.exit(0);
  }
  const type = (k: string): 'boolean' | 'string' =>
    options[k]?.kind === 'flag' ? 'boolean' : 'string';
  const names = [...Object.keys(options), 'json'];
  const config = Object.fromEntries(names.map((k) => [k, { type: type(k) }]));
  let given: Record<string, string | boolean | undefined> = {};
  try {
    given = parseArgs({ args, options: config, strict: true }).values as typeof given;
  } catch (err) {
    const known = Object.keys(config).map((k) => `--${k}`);
    usage(`${(err as Error).message.replaceAll('\n', ' ')} (options: ${known.join(' ')})`);
  }
  const values: Record<string, unknown> = { json: given.json };
  if (jsonFileOnly && given.json === '-') {
    usage('--json needs a file: this bench prints its figures as text as they come');
  }
  if (typeof given.json === 'string' && given.json !== '-') {
    // Checked before the run, so an unwritable path does not lose a whole run's report.
    try {
      mkdirSync(dirname(given.json), { recursive: true });
      writeFileSync(given.json, '');
    } catch (err) {
      usage(`--json ${given.json}: cannot write it (${(err as NodeJS.ErrnoException).code})`);
    }
  }
  for (const [name, o] of Object.entries(options)) {
    const raw = given[name];
    if (o.kind === 'flag') values[name] = raw === true;
    else if (typeof raw === 'boolean') usage(`--${name} needs a value`);
    else if (o.kind === 'list') {
      const list = (raw ?? o.default).split(',');
      const unknown = list.filter((x) => !o.choices.includes(x));
      if (unknown.length > 0) {
        usage(`--${name}: unknown ${unknown.join(', ')} (known: ${o.choices.join(',')})`);
      }
      values[name] = list;
    } else if (raw === undefined || o.kind === 'text') values[name] = raw ?? o.default;
    else if (o.kind === 'oneOf') {
      if (!o.choices.includes(raw)) usage(`--${name} must be ${o.choices.join(' or ')}`);
      values[name] = raw;
    } else {
      const n = raw.trim() === '' ? Number.NaN : Number(raw);
      if (!(n >= o.min && n <= o.max) || (o.kind === 'int' && !Number.isInteger(n))) {
        const what = o.kind === 'int' ? 'an integer' : 'a number';
        const range =
          o.max === Number.POSITIVE_INFINITY ? `≥ ${o.min}` : `from ${o.min} to ${o.max}`;
        usage(`--${name} must be ${what} ${range} (got ${JSON.stringify(raw)})`);
      }
      values[name] = n;
    }
  }
  return values as Values<O>;
}

/** `--help`'s text: each option with what it takes and its default, then where the laws are. */
function help(options: Record<string, Option>, jsonFileOnly: boolean): string {
  const name = basename(process.argv[1] ?? 'drill', '.js');
  const rows = Object.entries(options).map(([k, o]) => {
    if (o.kind === 'flag') return [`--${k}`, 'flag', 'off'];
    if (o.kind === 'text') return [`--${k}`, 'text', o.default];
    if (o.kind === 'list') return [`--${k}`, `some of ${o.choices.join(',')}`, o.default];
    if (o.kind === 'oneOf') return [`--${k}`, o.choices.join(' | '), o.default];
    const range = o.max === Number.POSITIVE_INFINITY ? `≥ ${o.min}` : `${o.min} to ${o.max}`;
    return [`--${k}`, `${o.kind === 'int' ? 'an integer' : 'a number'} ${range}`, `${o.default}`];
  });
  rows.push(
    jsonFileOnly
      ? ['--json <file>', 'the figures as JSON, to file', 'off']
      : ['--json [file]', 'the report as JSON (to stdout, or to file too)', 'off'],
  );
  const where = 'usage, laws and exit codes: drills/README.md';
  return `${name} options:\n${columns(rows, ['option', 'takes', 'default'])}\n${where}\n`;
}

/**
 * What a drill's `main` returns: its first line; tables (`body`, text) and `figures` (label →
 * value) printed under it; its laws; anything else goes to the JSON only.
 */
export interface Outcome {
  title: string;
  body?: string[];
  figures?: Record<string, string | number>;
  checks: Check[];
  [data: string]: unknown;
}

/** A drill that cannot start for a reason its message says whole (no server at a URL): printed without a stack. */
export class SetupError extends Error {}

/**
 * A bench's set-up step (`runDrill` does this for drills): its value, or, when it throws a
 * {@link SetupError}, `<name> failed to run: <message>` on one line of stderr and exit code 2.
 */
export async function setUp<T>(name: string, step: Promise<T>): Promise<T> {
  try {
    return await step;
  } catch (err) {
    if (err instanceof SetupError) usage(`${name} failed to run: ${err.message}`);
    throw err;
  }
}

/**
 * Runs a drill: `main` measures and judges; the outcome is printed (title, body, one line per
 * check and the verdict) or, with `--json`, written as JSON (`'-'`: one line instead of the
 * text; a path: pretty JSON there as well). Exits 0 when every check passes, 1 when one fails,
 * 2 when `main` throws.
 */
export function runDrill(name: string, json: string | undefined, main: () => Promise<Outcome>) {
  main().then(
    ({ body = [], ...outcome }) => {
      const { checks, figures = {} } = outcome;
      const pass = checks.every((c) => c.pass);
      const report = JSON.stringify({ drill: name, ...outcome, pass }, null, json === '-' ? 0 : 2);
      if (json === '-') process.stdout.write(`${report}\n`);
      else {
        if (json !== undefined) {
          mkdirSync(dirname(json), { recursive: true });
          writeFileSync(json, `${report}\n`);
        }
        const lines = [outcome.title, ...body, columns(Object.entries(figures))];
        lines.push(...checks.map((c) => `${verdict(c.pass)}: ${c.name} — ${c.detail}`));
        const held = checks.filter((c) => c.pass).length;
        if (checks.length > 0)
          lines.push(`${verdict(pass)}: ${name}, ${held} of ${checks.length} laws hold`);
        process.stdout.write(`${lines.filter((l) => l !== '').join('\n')}\n`);
      }
      process.exit(pass ? 0 : 1);
    },
    (err: unknown) => {
      const why = err instanceof SetupError ? err.message : ((err as Error)?.stack ?? err);
      process.stderr.write(`${name} drill failed to run: ${why}\n`);
      process.exit(2);
    },
  );
}
