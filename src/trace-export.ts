/**
 * The service's own trace export: the OpenTelemetry SDK with a batch span
 * processor and an OTLP/HTTP exporter, started by `serve` when the
 * configuration asks for one (`traceExport`, src/config/otlp.ts). The SDK's
 * modules are imported here, dynamically, and only then: a library user, or
 * a service without an exporter, never loads them.
 */
import { context, DiagLogLevel, diag, propagation } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { TraceExportConfig } from './config/schema.js';
import type { TracingOptions } from './store/tracing.js';

/** A running trace export. */
export interface TraceExport {
  /** What the store is given: the SDK's tracer and how ids appear. */
  tracing: TracingOptions;
  /** Exports the spans still queued, then stops (bounded by the exporter's timeout). */
  shutdown(): Promise<void>;
}

/**
 * Starts the SDK: a tracer provider whose batch span processor sends to the
 * OTLP/HTTP exporter of `config.protocol` at `config.url`, the resource
 * `service.name=echostore` (`OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`
 * override it), and, process-wide, the async-hooks context manager and the
 * W3C Trace Context propagator, so reads join the caller's `traceparent` and
 * HTTP origins receive theirs. The SDK's own warnings (a failed export) go to
 * `log`. The tracer provider is not registered globally: only the store uses it.
 */
export async function startTraceExport(
  config: TraceExportConfig,
  version: string,
  log: Logger,
): Promise<TraceExport> {
  const [sdk, hooks, core, resources, exporters] = await Promise.all([
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
    config.protocol === 'http/json'
      ? import('@opentelemetry/exporter-trace-otlp-http')
      : import('@opentelemetry/exporter-trace-otlp-proto'),
  ]);
  const details = (args: unknown[]) => (args.length === 0 ? {} : { args });
  diag.setLogger(
    {
      error: (message, ...args) => log.error(details(args), `opentelemetry: ${message}`),
      warn: (message, ...args) => log.warn(details(args), `opentelemetry: ${message}`),
      info: () => {},
      debug: () => {},
      verbose: () => {},
    },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
  const resource = resources
    .resourceFromAttributes({ 'service.name': 'echostore', 'service.version': version })
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const exporter = new exporters.OTLPTraceExporter({ url: config.url, headers: config.headers });
  const provider = new sdk.BasicTracerProvider({
    resource,
    spanProcessors: [new sdk.BatchSpanProcessor(exporter)],
  });
  context.setGlobalContextManager(new hooks.AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(
    new core.CompositePropagator({
      propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()],
    }),
  );
  return {
    tracing: { tracer: provider.getTracer('echostore', version), ids: config.ids },
    shutdown: () => provider.shutdown(),
  };
}
