/**
 * Traces through `@opentelemetry/api` only: the application brings the SDK
 * (exporter, context manager, propagator), EchoStore only makes spans. Off
 * (no `tracer` given) it costs nothing: the table keeps its untraced `get`
 * and the flight's hooks are never installed (chosen at construction).
 *
 * One span per read, `echostore.get`, child of the caller's active span,
 * with the layer that answered, hit, stale, coalesced and found, and the
 * flight's lease wait and admission wait when it had them; the load is its
 * child span, `echostore.load`, active while the loader runs, so an `http`
 * source passes it on as `traceparent`. OpenTelemetry has no cache semantic
 * conventions yet (open-telemetry/semantic-conventions#1747): the attributes
 * are namespaced `echostore.*`.
 */
import { createHash } from 'node:crypto';
import {
  context,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { EchoStoreError } from '../errors.js';
import type { LoadFn, ReadResult } from './types.js';

/** How ids appear in spans: `hash` (default; SHA-256, 16 hex digits) or `plain`. */
export type TraceIds = 'hash' | 'plain';

/** Tracing options of a store. */
export interface TracingOptions {
  /** From `trace.getTracer('echostore')` of your SDK. */
  tracer: Tracer;
  /** Ids are personal data often: hashed unless `plain`. Default `hash`. */
  ids?: TraceIds;
}

/** What a flight tells the tracer of one id (the reads of that id carry it). */
export interface FlightTrace {
  /** The flight waited `ms` for another instance's lease (a fill or a takeover). */
  leaseWaited(id: string, ms: number): void;
  /** The load waited `ms` for an admission slot. */
  admitted(id: string, ms: number): void;
}

/** The spans of one table's reads. */
export class TableTracer implements FlightTrace {
  readonly #tracer: Tracer;
  readonly #table: string;
  readonly #ids: TraceIds;
  /** The open read spans of each id, oldest first: the first is the load's parent. */
  readonly #open = new Map<string, Span[]>();

  constructor(table: string, options: TracingOptions) {
    this.#tracer = options.tracer;
    this.#table = table;
    this.#ids = options.ids ?? 'hash';
  }

  /** The id as it appears in spans. */
  idAttribute(id: string): string {
    return this.#ids === 'plain'
      ? id
      : createHash('sha256').update(id, 'utf8').digest('hex').slice(0, 16);
  }

  /** Runs `read` as the span `echostore.get` of `id`, child of the active span. */
  read(id: string, read: () => Promise<ReadResult>): Promise<ReadResult> {
    const span = this.#tracer.startSpan('echostore.get', {
      kind: SpanKind.INTERNAL,
      attributes: { 'echostore.table': this.#table, 'echostore.id': this.idAttribute(id) },
    });
    const open = this.#open.get(id);
    if (open === undefined) this.#open.set(id, [span]);
    else open.push(span);
    const done = () => {
      const spans = this.#open.get(id);
      const at = spans?.indexOf(span) ?? -1;
      if (spans !== undefined && at >= 0) spans.splice(at, 1);
      if (spans?.length === 0) this.#open.delete(id);
      span.end();
    };
    return context.with(trace.setSpan(context.active(), span), read).then(
      (result) => {
        span.setAttributes({
          'echostore.layer': result.layer,
          'echostore.hit': result.layer !== 'origin',
          'echostore.found': result.found,
          'echostore.stale': result.stale,
          'echostore.coalesced': result.coalesced,
        });
        done();
        return result;
      },
      (err: unknown) => {
        failed(span, err);
        done();
        throw err;
      },
    );
  }

  /** `load` run as the span `echostore.load`, child of the id's oldest open read (or the active span). */
  wrapLoad(load: LoadFn): LoadFn {
    return (id, ctx) => {
      const parent = this.#open.get(id)?.[0];
      const parentContext =
        parent === undefined ? context.active() : trace.setSpan(context.active(), parent);
      const span = this.#tracer.startSpan(
        'echostore.load',
        {
          kind: SpanKind.INTERNAL,
          attributes: { 'echostore.table': this.#table, 'echostore.id': this.idAttribute(id) },
        },
        parentContext,
      );
      return context.with(trace.setSpan(parentContext, span), async () => {
        try {
          const value = await load(id, ctx);
          span.setAttribute('echostore.found', value !== undefined);
          return value;
        } catch (err) {
          failed(span, err);
          throw err;
        } finally {
          span.end();
        }
      });
    };
  }

  leaseWaited(id: string, ms: number): void {
    for (const span of this.#open.get(id) ?? []) {
      span.setAttribute('echostore.lease_wait_ms', Math.round(ms));
    }
  }

  admitted(id: string, ms: number): void {
    for (const span of this.#open.get(id) ?? []) {
      span.setAttribute('echostore.admission_wait_ms', Math.round(ms));
    }
  }
}

function failed(span: Span, err: unknown): void {
  const code = err instanceof EchoStoreError ? err.code : 'ECC_INTERNAL';
  span.setAttribute('echostore.error', code);
  span.setStatus({ code: SpanStatusCode.ERROR, message: code });
}
