/**
 * The CLI's commands that talk to a running instance (`inspect`, `purge`,
 * `warm`, `stats`) and `check-config`. Each prints to `out` and returns its
 * exit code (docs/cli.md); errors are thrown to the dispatcher.
 */
import { readFileUpTo } from '../config/bounded-read.js';
import {
  call,
  itemPath,
  NotEchoStoreError,
  type Remote,
  tablePath,
  UnreadableFileError,
  UsageError,
} from './remote.js';

/**
 * The text of an ids file, at most what start-up warming takes; a missing or unreadable one is
 * the caller's mistake (exit 64).
 */
async function readIds(file: string): Promise<string> {
  // Loaded here only: its module brings the store, which the other commands never need.
  const { MAX_IDS_FILE_BYTES } = await import('../warm/startup.js');
  try {
    return readFileUpTo(file, MAX_IDS_FILE_BYTES);
  } catch (err) {
    throw new UnreadableFileError(
      `cannot read --file ${file} (${(err as { code?: string }).code ?? (err as Error).message})`,
    );
  }
}

/** Where a command writes its answer. */
export type Out = (line: string) => void;

interface Row {
  version: number;
  negative: boolean;
  softTtlMs: number;
  hardTtlMs: number;
  deltaMs: number;
  bytes: number;
  l1TtlMs?: number;
  /** Absent from an instance of a release before tags were inspected. */
  tags?: string[];
  /** A purge the instance knows of covers it; absent from a release before purges were inspected. */
  purged?: 'hard' | 'soft' | null;
}

interface Inspection {
  table: string;
  id: string;
  l1: Row | null;
  l2: Row | null;
  lease: { holder: string; ttlMs: number } | null;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

function describeRow(row: Row | null): string {
  if (row === null) return 'none';
  const what = row.negative ? 'not found (negative)' : `version ${row.version}`;
  const fresh =
    row.purged === 'hard'
      ? 'purged (the next read reloads it)'
      : row.purged === 'soft'
        ? 'purged soft (served stale while one refresh runs)'
        : row.softTtlMs >= 0
          ? `fresh for ${seconds(row.softTtlMs)}`
          : `stale ${seconds(-row.softTtlMs)}`;
  const l1 = row.l1TtlMs === undefined ? '' : `, leaves L1 in ${seconds(row.l1TtlMs)}`;
  const tags =
    row.tags === undefined
      ? ''
      : row.tags.length === 0
        ? ', no tags'
        : `, tags ${row.tags.join(' ')}`;
  return `${what}, ${fresh}, gone in ${seconds(row.hardTtlMs)}${l1}, loaded in ${row.deltaMs} ms, ${row.bytes} bytes${tags}`;
}

/** `inspect <table> <id>`: the id layer by layer on one instance. Exit 0. */
export async function inspect(remote: Remote, table: string, id: string, json: boolean, out: Out) {
  const r = (await call(remote, 'GET', itemPath('/v1/admin', table, id))) as Inspection;
  if (typeof r?.table !== 'string' || !('l1' in r)) throw new NotEchoStoreError(remote.url);
  if (json) {
    out(JSON.stringify(r, null, 2));
    return 0;
  }
  out(`${r.table} ${JSON.stringify(r.id)} on ${remote.url}`);
  out(`  L1 (this instance): ${describeRow(r.l1)}`);
  out(`  L2 (Valkey):        ${describeRow(r.l2)}`);
  out(
    `  lease:              ${r.lease === null ? 'none' : `held by ${r.lease.holder}, ${seconds(r.lease.ttlMs)} left`}`,
  );
  return 0;
}

/** What `purge` removes: one id (its DELETE), rows by tag, or the whole table; `soft` for the latter two. */
export type PurgeTarget =
  | { id: string }
  | { tags: string[]; soft: boolean }
  | { all: true; soft: boolean };

/**
 * `purge <table> <id>`: the id's DELETE (a tombstone in Valkey, dropped from
 * every L1). `purge <table> --tag t … [--soft]` and `purge <table> --all
 * [--soft]`: `POST /v1/tables/:table/purge` (hard: purged rows are misses;
 * soft: served stale while one refresh per row runs). Exit 0.
 */
export async function purge(remote: Remote, table: string, target: PurgeTarget, out: Out) {
  if ('id' in target) {
    await call(remote, 'DELETE', itemPath('/v1', table, target.id));
    out(`purged ${table} ${JSON.stringify(target.id)}`);
    return 0;
  }
  const r = (await call(remote, 'POST', `${tablePath('/v1', table)}/purge`, target)) as {
    epoch: number;
  };
  const what = 'all' in target ? 'every row' : `tags ${target.tags.join(' ')}`;
  out(`purged ${table}: ${what}, ${target.soft ? 'soft' : 'hard'} (epoch ${r.epoch})`);
  return 0;
}

/**
 * `warm <table> [id …] [--file f]`: reads the ids into the cache through the
 * instance, at most 1,000 a request. Exit 0, or 1 when an id failed.
 */
export async function warm(
  remote: Remote,
  table: string,
  ids: readonly string[],
  file: string | undefined,
  out: Out,
) {
  const all = [...ids];
  if (file !== undefined) {
    for (const line of (await readIds(file)).split('\n')) {
      if (line.trim() !== '') all.push(line.trim());
    }
  }
  let warmed = 0;
  let notFound = 0;
  const failed: Array<{ id: string; code: string }> = [];
  for (let i = 0; i < all.length; i += 1000) {
    const r = (await call(remote, 'POST', `${tablePath('/v1', table)}/warm`, {
      ids: all.slice(i, i + 1000),
    })) as { warmed: number; notFound: number; failed: typeof failed };
    warmed += r.warmed;
    notFound += r.notFound;
    failed.push(...r.failed);
  }
  out(`${table}: ${warmed} warmed, ${notFound} not found, ${failed.length} failed`);
  for (const f of failed) out(`  ${JSON.stringify(f.id)}: ${f.code}`);
  return failed.length > 0 ? 1 : 0;
}

interface TableStats {
  name: string;
  stats: Record<string, number>;
}

/** `stats`: each table's counters and gauges on one instance. Exit 0. */
export async function stats(remote: Remote, json: boolean, out: Out) {
  const r = (await call(remote, 'GET', '/v1/tables')) as { tables?: TableStats[] };
  if (!Array.isArray(r?.tables)) throw new NotEchoStoreError(remote.url);
  if (json) {
    out(JSON.stringify(r, null, 2));
    return 0;
  }
  const columns = [
    'hits',
    'misses',
    'loads',
    'l2_hits',
    'coalesced',
    'l1_entries',
    'flights',
    'load_limit',
    'queue_delay_ms',
  ];
  const rows = r.tables.map((t) => {
    const s = t.stats;
    const reads = (s.hits ?? 0) + (s.misses ?? 0);
    const ratio = reads === 0 ? '-' : `${((100 * (s.hits ?? 0)) / reads).toFixed(1)}%`;
    return [t.name, ratio, ...columns.map((c) => String(s[c] ?? '-'))];
  });
  const header = ['table', 'l1_hit_ratio', ...columns];
  const widths = header.map((h, i) =>
    Math.max(h.length, ...rows.map((row) => row[i]?.length ?? 0)),
  );
  for (const row of [header, ...rows]) {
    out(
      row
        .map((cell, i) => cell.padEnd(widths[i] as number))
        .join('  ')
        .trimEnd(),
    );
  }
  return 0;
}

/**
 * `check-config [--config f]`: validates the configuration as `serve` does,
 * with the same function (`loadStartupConfig`: file, environment overrides,
 * defaults, then every refusal that needs no server), connecting to nothing.
 * Exit 0; an invalid one throws `ECC_BAD_CONFIG` (exit 2).
 */
export async function checkConfig(argv: readonly string[], out: Out) {
  const { configArgsUsageError } = await import('../config/load.js');
  const usage = configArgsUsageError(argv);
  if (usage !== undefined) throw new UsageError(usage);
  const { loadStartupConfig } = await import('../config/check.js');
  const config = await loadStartupConfig({ argv: [...argv], env: process.env });
  const tables = Object.keys(config.tables);
  out(
    `${config.origin}: valid (${tables.length} table${tables.length === 1 ? '' : 's'}: ${tables.join(', ')})`,
  );
  return 0;
}
