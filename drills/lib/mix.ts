/**
 * A mixed read/write workload for autocannon: one request template whose
 * `setupRequest` draws each request's kind at random, and whose `onResponse`
 * tallies what came back. With `pipelining: 1` a connection's context holds
 * the request in flight, so the response is attributed to the kind that was sent.
 */
import type autocannon from 'autocannon';

/** What a request of the mix does. */
export type Kind = 'hot GET' | 'cold GET' | 'PUT' | 'DELETE';

/** The kinds in the order they are reported. */
export const KINDS: readonly Kind[] = ['hot GET', 'cold GET', 'PUT', 'DELETE'];

/** Options of {@link mixedLoad}. */
export interface MixOptions {
  /** The table the items live in. */
  table: string;
  /** Ids `hot-0` … `hot-<hotIds − 1>`: warmed before the run, read, written and invalidated. */
  hotIds: number;
  /** Makes cold ids unique to this run: `cold-<tag>-<n>`. */
  tag: string;
  /** Share of each kind, summing to 1. */
  weights: Readonly<Record<Kind, number>>;
}

/** Responses of one kind. */
export interface KindTally {
  responses: number;
  /** Responses by HTTP status. */
  statuses: Map<number, number>;
  /** Time from building the request to its response, in milliseconds. */
  latenciesMs: number[];
  /** Responses whose `Cache-Status` says `detail=l1` (an L1 hit). */
  l1Hits: number;
}

/** What the mix saw, filled in while autocannon runs. */
export interface Tally {
  byKind: Record<Kind, KindTally>;
  /** Non-2xx responses by `<status> <error code>` (`<status> -` when the body has no code). */
  errorCodes: Map<string, number>;
  /** Responses in all. */
  responses: number;
}

interface Context {
  kind?: Kind;
  sentAtMs?: number;
}

/** The path of item `id` in `table`. */
export function itemPath(table: string, id: string): string {
  return `/v1/tables/${table}/items/${encodeURIComponent(id)}`;
}

/** The id of hot item `i`. */
export function hotId(i: number): string {
  return `hot-${i}`;
}

/**
 * The autocannon request template of the mix and the tally it fills. Pass
 * `[request]` as `requests` with `pipelining: 1` (the default).
 */
export function mixedLoad(options: MixOptions): { request: autocannon.Request; tally: Tally } {
  const { table, hotIds, tag, weights } = options;
  const tally: Tally = {
    byKind: Object.fromEntries(
      KINDS.map((k): [Kind, KindTally] => [
        k,
        { responses: 0, statuses: new Map(), latenciesMs: [], l1Hits: 0 },
      ]),
    ) as Record<Kind, KindTally>,
    errorCodes: new Map(),
    responses: 0,
  };
  let cold = 0;
  let writes = 0;
  const pick = (): Kind => {
    let r = Math.random();
    for (const k of KINDS) {
      r -= weights[k];
      if (r < 0) return k;
    }
    return 'hot GET';
  };
  const randomHot = () => hotId(Math.floor(Math.random() * hotIds));

  const request: autocannon.Request = {
    setupRequest(req, context) {
      const ctx = context as Context;
      const kind = pick();
      ctx.kind = kind;
      ctx.sentAtMs = performance.now();
      switch (kind) {
        case 'hot GET':
          return { ...req, method: 'GET', path: itemPath(table, randomHot()), headers: {} };
        case 'cold GET':
          return {
            ...req,
            method: 'GET',
            path: itemPath(table, `cold-${tag}-${cold++}`),
            headers: {},
          };
        case 'PUT': {
          const id = randomHot();
          const body = JSON.stringify({ id, write: ++writes, at: Date.now() });
          const headers = { 'content-type': 'application/json' };
          return { ...req, method: 'PUT', path: itemPath(table, id), headers, body };
        }
        case 'DELETE':
          return { ...req, method: 'DELETE', path: itemPath(table, randomHot()), headers: {} };
      }
    },
    onResponse(status, body, context, headers) {
      const ctx = context as Context;
      const t = tally.byKind[ctx.kind ?? 'hot GET'];
      tally.responses++;
      t.responses++;
      t.statuses.set(status, (t.statuses.get(status) ?? 0) + 1);
      if (ctx.sentAtMs !== undefined) t.latenciesMs.push(performance.now() - ctx.sentAtMs);
      if (status >= 200 && status < 300) {
        if (/detail=l1(?:;|$)/.test(header(headers, 'cache-status'))) t.l1Hits++;
        return;
      }
      const key = `${status} ${errorCode(body)}`;
      tally.errorCodes.set(key, (tally.errorCodes.get(key) ?? 0) + 1);
    },
  };
  return { request, tally };
}

function header(headers: autocannon.Request['headers'], name: string): string {
  for (const [k, v] of Object.entries(headers ?? {})) {
    if (k.toLowerCase() === name) return String(v);
  }
  return '';
}

/** `error.code` of an EchoStore error body, or `-`. */
function errorCode(body: string): string {
  try {
    const code = (JSON.parse(body) as { error?: { code?: unknown } }).error?.code;
    return typeof code === 'string' ? code : '-';
  } catch {
    return '-';
  }
}
