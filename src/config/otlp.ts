/**
 * The service's trace export, resolved from the file's `tracing` section and
 * OpenTelemetry's own environment variables (the SDK environment variable and
 * OTLP exporter specifications): which exporter, which endpoint, which
 * encoding. Only what decides whether and where to export is read here; the
 * SDK reads the rest itself (`OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`,
 * `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, …).
 */
import { ConfigError } from '../errors.js';
import {
  DEFAULT_OTLP_ENDPOINT,
  type FileConfig,
  OTLP_PROTOCOLS,
  type OtlpProtocol,
  type TraceExportConfig,
} from './schema.js';

/** The `OTEL_*` variables this resolution reads, in the order they are checked. */
export const OTEL_ENV = [
  'OTEL_SDK_DISABLED',
  'OTEL_TRACES_EXPORTER',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
  'OTEL_EXPORTER_OTLP_PROTOCOL',
] as const;

/**
 * The trace export to start, or undefined for none.
 *
 * - Off when `OTEL_SDK_DISABLED` is `true` (any case), whatever else is set.
 * - The exporter is `OTEL_TRACES_EXPORTER` (a comma-separated list: `otlp`, or
 *   `none`), else `tracing.exporter`, else `otlp` when an endpoint is given
 *   anywhere and `none` when not: unlike an SDK's default, nothing is sent to
 *   `localhost:4318` unless asked.
 * - The URL is `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, else
 *   `OTEL_EXPORTER_OTLP_ENDPOINT` or `tracing.endpoint` (else
 *   {@link DEFAULT_OTLP_ENDPOINT}) with `v1/traces` appended to its path.
 * - The encoding is `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else
 *   `OTEL_EXPORTER_OTLP_PROTOCOL`, else `tracing.protocol`, else `http/protobuf`.
 *
 * @param env the environment; an empty variable counts as unset.
 * @throws {ConfigError} `ECC_BAD_CONFIG` naming the variable (or `tracing.…`) for an
 *   exporter other than `otlp` and `none`, an encoding other than `http/protobuf` and
 *   `http/json` (`grpc` included), or an endpoint that is not an http(s) URL or
 *   carries credentials. The URL is never quoted (it may hold a token in its query).
 */
export function resolveTraceExport(
  tracing: FileConfig['tracing'],
  env: (name: string) => string | undefined,
  origin: string,
): TraceExportConfig | undefined {
  if (env('OTEL_SDK_DISABLED')?.trim().toLowerCase() === 'true') return undefined;
  const tracesEndpoint = env('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const baseFromEnv = env('OTEL_EXPORTER_OTLP_ENDPOINT');
  const exporter = exporterOf(env('OTEL_TRACES_EXPORTER')) ?? tracing?.exporter;
  const endpointGiven =
    tracesEndpoint !== undefined || baseFromEnv !== undefined || tracing?.endpoint !== undefined;
  if (exporter === 'none' || (exporter === undefined && !endpointGiven)) return undefined;

  let url: string;
  if (tracesEndpoint !== undefined) {
    url = checkEndpoint(
      tracesEndpoint,
      'environment variable OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: ',
    );
  } else {
    const [base, where] =
      baseFromEnv !== undefined
        ? [baseFromEnv, 'environment variable OTEL_EXPORTER_OTLP_ENDPOINT: ']
        : [tracing?.endpoint ?? DEFAULT_OTLP_ENDPOINT, `${origin}: `];
    url = withTracesPath(checkEndpoint(base, where));
  }
  const protocol =
    protocolOf(env('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'), 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ??
    protocolOf(env('OTEL_EXPORTER_OTLP_PROTOCOL'), 'OTEL_EXPORTER_OTLP_PROTOCOL') ??
    tracing?.protocol ??
    'http/protobuf';
  return { url, protocol, headers: { ...tracing?.headers }, ids: tracing?.ids ?? 'hash' };
}

/** `OTEL_TRACES_EXPORTER`'s choice: `otlp`, `none`, or undefined when unset. */
function exporterOf(value: string | undefined): 'otlp' | 'none' | undefined {
  if (value === undefined) return undefined;
  const names = value
    .split(',')
    .map((n) => n.trim().toLowerCase())
    .filter((n) => n !== '');
  const unknown = names.find((n) => n !== 'otlp' && n !== 'none');
  if (unknown !== undefined) {
    throw new ConfigError(
      `environment variable OTEL_TRACES_EXPORTER: tracing.exporter: "${unknown.slice(0, 40)}" is not supported (otlp or none)`,
      { field: 'tracing.exporter' },
    );
  }
  return names.includes('otlp') ? 'otlp' : 'none';
}

function protocolOf(value: string | undefined, variable: string): OtlpProtocol | undefined {
  if (value === undefined) return undefined;
  const protocol = value.trim();
  if ((OTLP_PROTOCOLS as readonly string[]).includes(protocol)) return protocol as OtlpProtocol;
  const why =
    protocol === 'grpc' ? 'grpc is not supported' : `"${protocol.slice(0, 40)}" is unknown`;
  throw new ConfigError(
    `environment variable ${variable}: tracing.protocol: ${why} (use ${OTLP_PROTOCOLS.join(' or ')})`,
    { field: 'tracing.protocol' },
  );
}

/**
 * `url` when it is an http(s) URL without credentials.
 *
 * @param where what the message starts with: the variable, or the file, that gave it.
 * @throws {ConfigError} naming `tracing.endpoint`.
 */
function checkEndpoint(url: string, where: string): string {
  const field = 'tracing.endpoint';
  const prefix = `${where}${field}`;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`${prefix}: is not a valid URL (expected http://host:port)`, { field });
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new ConfigError(`${prefix}: must be an http:// or https:// URL (OTLP/HTTP)`, { field });
  }
  if (parsed.username !== '' || parsed.password !== '') {
    throw new ConfigError(
      `${prefix}: must not contain credentials (user:password@); send them in tracing.headers or OTEL_EXPORTER_OTLP_HEADERS`,
      { field },
    );
  }
  return url;
}

/** A base endpoint's traces URL: `v1/traces` appended to its path (the OTLP/HTTP rule). */
export function withTracesPath(base: string): string {
  const url = new URL(base);
  url.pathname = `${url.pathname.replace(/\/+$/, '')}/v1/traces`;
  return url.toString();
}
