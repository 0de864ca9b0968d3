/**
 * The caller's trace context on the HTTP routes: with a traced store, a read
 * runs as a child of the context the registered propagator finds in the
 * request's headers (`traceparent`, W3C Trace Context). Untraced stores never
 * call this (the routes choose per store), so they pay nothing.
 */

import type { IncomingHttpHeaders } from 'node:http';
import { context, propagation } from '@opentelemetry/api';

/** Runs `run` in the context extracted from `headers` (the active one when they carry none). */
export function inCallerTrace<T>(headers: IncomingHttpHeaders, run: () => T): T {
  return context.with(propagation.extract(context.active(), headers), run);
}
