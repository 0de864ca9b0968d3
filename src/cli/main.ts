#!/usr/bin/env node
/**
 * `echostore <command>`: the service and its operator tools (docs/cli.md).
 * Commands that inspect or change the cache talk to a running instance over
 * its HTTP API (`--url`, the admin token from `--token` or
 * `ECHOSTORE_ADMIN_TOKEN`), so they see exactly what that instance sees.
 */
import { parseArgs } from 'node:util';
import { EchoStoreError } from '../errors.js';
import { checkConfig, inspect, type PurgeTarget, purge, stats, warm } from './commands.js';
import {
  NotEchoStoreError,
  type Remote,
  RemoteError,
  UnreachableError,
  UnreadableFileError,
  UsageError,
} from './remote.js';

/** Exit codes, documented in docs/cli.md. */
export const EXIT = {
  ok: 0,
  /** The instance answered with an error, or some ids failed to warm. */
  failed: 1,
  /** The configuration is invalid (`serve`, `check-config`). */
  badConfig: 2,
  /** The instance could not be reached. */
  unreachable: 3,
  /** Unknown command, missing or unknown argument (sysexits' EX_USAGE). */
  usage: 64,
} as const;

/** The longest `--timeout`: a day. More is a typo, and past 2^31 − 1 ms timers cannot wait. */
const MAX_TIMEOUT_MS = 86_400_000;

const REMOTE_OPTIONS = `

Options:
  --url <url>      the instance, with any path prefix it is served under
                   (default: $ECHOSTORE_URL, else http://127.0.0.1:8080)
  --token <token>  its admin token (default: $ECHOSTORE_ADMIN_TOKEN)
  --timeout <ms>   longest wait for an answer (default 10000, at most 86400000)`;

const HELP: Record<string, string> = {
  '': `Usage: echostore <command> [options]

Commands:
  serve          run the service (what npm start runs)
  inspect        what the cache holds for an id: L1 on an instance, the L2 value, the lease
  purge          delete an id, or purge rows by tag or the whole table (hard or soft)
  warm           read ids into the cache
  stats          each table's counters on an instance
  check-config   validate a configuration file without starting

Run echostore <command> --help for its options. Exit codes: docs/cli.md.`,
  serve: `Usage: echostore serve [--config <file>]

Runs the service: reads the configuration (--config, else $ECHOSTORE_CONFIG, else the
built-in demo), serves HTTP, and stops gracefully on SIGTERM or SIGINT.
Exit codes: 64 unknown argument or --config without a file, 2 invalid configuration,
1 any other failure to start.`,
  inspect: `Usage: echostore inspect <table> <id> [--json]

Shows what the cache holds for <id>: the instance's L1 row, the Valkey value's header and
the lease with its holder, each with the time it has left, and each row's purge tags.
Never loads. Admin route.${REMOTE_OPTIONS}`,
  purge: `Usage: echostore purge <table> <id>
       echostore purge <table> --tag <tag> [--tag <tag> …] [--soft]
       echostore purge <table> --all [--soft]

With an id: deletes it from the cache (a tombstone in Valkey, the row dropped from every
instance's L1). With --tag or --all: purges the rows carrying any of the tags, or every row
of the table, on every instance; hard by default (purged rows are misses), --soft serves them
stale while one refresh per row runs. The source is not touched. Admin route.${REMOTE_OPTIONS}`,
  warm: `Usage: echostore warm <table> [<id> …] [--file <file>]

Reads the ids (and those of --file, one a line) into the cache through the instance,
1000 a request. Exit 1 when any id failed (each is listed with its code). Admin route.${REMOTE_OPTIONS}`,
  stats: `Usage: echostore stats [--json]

Prints each table's counters and gauges on the instance (GET /v1/tables).${REMOTE_OPTIONS}`,
  'check-config': `Usage: echostore check-config [--config <file>]

Validates the configuration with serve's own start-up checks (the file, the environment
overrides, the defaults, then each source and warm-up as far as no server is needed: SQLite
files and queries, URLs, warm-up files), connecting to no server. What only a server can
tell (Valkey, a database, a change stream) is left to serve. Exit 0 when valid, 2 when not.`,
};

/** Runs one command line; resolves with its exit code (`serve` never resolves: it runs until stopped). */
export async function run(argv: readonly string[], out = print, err = printErr): Promise<number> {
  const [command = '', ...rest] = argv;
  if (command === '' || command === '--help' || command === '-h' || command === 'help') {
    out(HELP[''] as string);
    return command === '' ? EXIT.usage : EXIT.ok;
  }
  if (!(command in HELP)) {
    err(`echostore: unknown command "${command}"\n\n${HELP['']}`);
    return EXIT.usage;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    out(HELP[command] as string);
    return EXIT.ok;
  }
  try {
    return await dispatch(command, rest, out);
  } catch (e) {
    if (
      e instanceof UsageError ||
      String((e as { code?: unknown }).code ?? '').startsWith('ERR_PARSE_ARGS')
    ) {
      err(`echostore ${command}: ${(e as Error).message}\n\n${HELP[command]}`);
      return EXIT.usage;
    }
    if (e instanceof EchoStoreError && e.code === 'ECC_BAD_CONFIG') {
      err(`echostore: invalid configuration (${e.code}): ${e.message}`);
      return EXIT.badConfig;
    }
    if (e instanceof UnreadableFileError) {
      err(`echostore ${command}: ${e.message}`);
      return EXIT.usage;
    }
    if (e instanceof NotEchoStoreError) {
      err(`echostore ${command}: ${e.message}`);
      return EXIT.failed;
    }
    if (e instanceof RemoteError) {
      // The service's message speaks HTTP ("send Authorization: …"): say how the CLI sends it.
      const hint =
        e.code === 'ECC_UNAUTHORIZED'
          ? '\n(pass the admin token with --token or ECHOSTORE_ADMIN_TOKEN)'
          : '';
      err(`echostore ${command}: ${e.code} (HTTP ${e.status}): ${e.message}${hint}`);
      return EXIT.failed;
    }
    if (e instanceof UnreachableError) {
      err(`echostore ${command}: ${e.message}`);
      return EXIT.unreachable;
    }
    err(`echostore ${command}: ${(e as Error).stack ?? String(e)}`);
    return EXIT.failed;
  }
}

async function dispatch(command: string, rest: string[], out: (line: string) => void) {
  if (command === 'serve') {
    // Loaded only here: the other commands start fast without the whole service.
    const { runService } = await import('../serve.js');
    runService(rest);
    return new Promise<number>(() => {}); // runs until a signal; the process exits itself
  }
  if (command === 'check-config') {
    parseArgs({ args: rest, options: { config: { type: 'string' } }, strict: true });
    return await checkConfig(rest, out);
  }
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    strict: true,
    options: {
      url: { type: 'string' },
      token: { type: 'string' },
      timeout: { type: 'string' },
      json: { type: 'boolean' },
      file: { type: 'string' },
      tag: { type: 'string', multiple: true },
      all: { type: 'boolean' },
      soft: { type: 'boolean' },
    },
  });
  // Decimal digits only: Number() would also take '0x10', '+5', '1e3' and ' 100'.
  const timeout = values.timeout ?? '10000';
  const timeoutMs = Number(timeout);
  if (!(/^[1-9][0-9]*$/.test(timeout) && timeoutMs <= MAX_TIMEOUT_MS)) {
    throw new UsageError(
      `--timeout must be a positive integer of milliseconds, at most ${MAX_TIMEOUT_MS} (a day)`,
    );
  }
  const url = values.url ?? (process.env.ECHOSTORE_URL || 'http://127.0.0.1:8080');
  if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
    throw new UsageError('--url must be an http:// or https:// URL');
  }
  if (new URL(url).username !== '' || new URL(url).password !== '') {
    throw new UsageError('--url must not carry credentials: pass the admin token with --token');
  }
  if (new URL(url).search !== '' || new URL(url).hash !== '') {
    throw new UsageError('--url must not carry a query or a fragment (a path prefix is kept)');
  }
  const remote: Remote = {
    url,
    token: values.token ?? (process.env.ECHOSTORE_ADMIN_TOKEN || undefined),
    timeoutMs,
  };
  const json = values.json === true;
  const want = (n: number, what: string) => {
    if (positionals.length !== n) throw new UsageError(`expected ${what}`);
  };
  switch (command) {
    case 'inspect':
      want(2, '<table> <id>');
      return inspect(remote, positionals[0] as string, positionals[1] as string, json, out);
    case 'purge':
      return purge(remote, positionals[0] as string, purgeTarget(positionals, values), out);
    case 'warm': {
      const [table, ...ids] = positionals;
      if (table === undefined || (ids.length === 0 && values.file === undefined)) {
        throw new UsageError('expected <table> and ids, or --file');
      }
      return warm(remote, table, ids, values.file, out);
    }
    default:
      want(0, 'no arguments');
      return stats(remote, json, out);
  }
}

/** What `purge`'s arguments name: an id, or `--tag`s, or `--all` (exactly one of them). */
function purgeTarget(
  positionals: string[],
  values: { tag?: string[]; all?: boolean; soft?: boolean },
): PurgeTarget {
  const tags = values.tag ?? [];
  const soft = values.soft === true;
  const kinds =
    (positionals.length === 2 ? 1 : 0) + (tags.length > 0 ? 1 : 0) + (values.all ? 1 : 0);
  if (positionals.length < 1 || positionals.length > 2 || kinds !== 1) {
    throw new UsageError('expected <table> and exactly one of <id>, --tag <tag> …, --all');
  }
  if (positionals.length === 2) {
    if (soft) throw new UsageError('--soft goes with --tag or --all, not with an id');
    return { id: positionals[1] as string };
  }
  return values.all === true ? { all: true, soft } : { tags, soft };
}

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

function printErr(line: string): void {
  process.stderr.write(`${line}\n`);
}

run(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
