/**
 * A mixed read/write workload for autocannon: one request template whose
 * `setupRequest` draws each request's kind at random, and whose `onResponse`
 * tallies what came back. With `pipelining: 1` a connection's context holds
 * the request in flight, so the response is attributed to the kind that was sent.
 */
import type autocannon from 'autocannon';
import { errorCode, itemUrl } from './http.js';
import { bump } from './report.js';

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
  statuses: Record<string, number>;
  /** Time from building the request to its response, in milliseconds. */
  latenciesMs: number[];
  /** Responses whose `Cache-Status` says `detail=l1` (an L1 hit). */
  l1Hits: number;
}

/** What the mix saw, filled in while autocannon runs. */
export interface Tally {
  byKind: Record<Kind, KindTally>;
  /** Non-2xx responses by `<status> <error code>` (`<status> -` when the body has no code). */
  errorCodes: Record<string, number>;
  /** Responses in all. */
  responses: number;
}

interface Context {
  kind?: Kind;
  sentAtMs?: number;
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
        { responses: 0, statuses: {}, latenciesMs: [], l1Hits: 0 },
      ]),
    ) as Record<Kind, KindTally>,
    errorCodes: {},
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
      const id = kind === 'cold GET' ? `cold-${tag}-${cold++}` : randomHot();
      const path = itemUrl('', table, id);
      if (kind !== 'PUT') {
        return { ...req, method: kind === 'DELETE' ? 'DELETE' : 'GET', path, headers: {} };
      }
      const body = JSON.stringify({ id, write: ++writes, at: Date.now() });
      return { ...req, method: 'PUT', path, headers: { 'content-type': 'application/json' }, body };
    },
    onResponse(status, body, context, headers) {
      const ctx = context as Context;
      const t = tally.byKind[ctx.kind ?? 'hot GET'];
      tally.responses++;
      t.responses++;
      bump(t.statuses, String(status));
      if (ctx.sentAtMs !== undefined) t.latenciesMs.push(performance.now() - ctx.sentAtMs);
      if (status >= 200 && status < 300) {
        if (/detail=l1(?:;|$)/.test(header(headers, 'cache-status'))) t.l1Hits++;
        return;
      }
      bump(tally.errorCodes, `${status} ${errorCode(body) ?? '-'}`);
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
