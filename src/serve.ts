/**
 * The service: reads the config, builds the sources and the store, serves
 * HTTP, warms the configured ids before `/readyz` says ready, and shuts down
 * gracefully on SIGTERM/SIGINT: `/readyz` answers 503 at once, requests are
 * still served for `http.shutdownDelayMs`, then the server stops accepting,
 * running requests and flights settle, Valkey is quit, and the spans still
 * queued (with a trace export) are exported.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import closeWithGrace from 'close-with-grace';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import type { ChangeFollower } from './changes/follower.js';
import { type Followers, startFollowers } from './changes/start.js';
import { loadStartupConfig } from './config/check.js';
import { configArgsUsageError } from './config/load.js';
import { DEFAULT_WARM_CONCURRENCY, DEFAULT_WARM_TIMEOUT_MS } from './config/schema.js';
import { ConfigError, EchoStoreError } from './errors.js';
import { heapRoom } from './heap-ceiling.js';
import { watchHeapAfterGc } from './heap-gauge.js';
import { isLoopback, PROTECTED_MODE_HINT } from './http/auth.js';
import type { Lifecycle } from './http/ops.js';
import { buildServer } from './http/server.js';
import { collectNodeMetrics, packageVersion, registerBuildInfo } from './process-metrics.js';
import { buildSource, type Source, sourceFingerprint } from './sources/index.js';
import { DEFAULT_POLICY } from './store/policy.js';
import { createStore, type TableOptions } from './store/store.js';
import { startTraceExport, type TraceExport } from './trace-export.js';
import { redactUrl } from './valkey/client.js';
import { StartupWarmUp, type WarmConfig, type WarmPlan, warmIds } from './warm/startup.js';

/** How long closing may take after `shutdownDelayMs` before the process exits anyway, ms. */
const CLOSE_TIMEOUT_MS = 15_000;
/** How long running flights and writes get to settle once the server stops accepting, ms. */
const STORE_GRACE_MS = 5_000;

/**
 * Runs the service until a signal stops it (the process then exits).
 *
 * @param argv the arguments after the command: `--config <path>`.
 * @throws {ConfigError} `ECC_BAD_CONFIG` for an invalid configuration; a
 *   {@link ListenError} when the address cannot be listened on.
 */
export async function serve(argv: readonly string[]): Promise<void> {
  // The same checks as check-config (src/config/check.ts), before anything is built.
  const config = await loadStartupConfig({ argv: [...argv], env: process.env });
  const log = pino({
    level: config.log.level,
    redact: { paths: ['req.headers.authorization', '*.password', '*.token'], censor: '***' },
  });
  const registry = new Registry();
  collectNodeMetrics(registry);
  const version = packageVersion();
  registerBuildInfo(registry, version);
  // The SDK is loaded only when an exporter is configured (src/trace-export.ts).
  const traces: TraceExport | undefined =
    config.traceExport === undefined
      ? undefined
      : await startTraceExport(config.traceExport, version, log);
  watchHeapAfterGc(registry);

  const sources: Source[] = [];
  const tables: Record<string, TableOptions> = Object.create(null);
  const warmIdsOf = new Map<string, { config: WarmConfig; ids: string[] }>();
  for (const [name, { source, warm, ...policy }] of Object.entries(config.tables)) {
    try {
      const built = await buildSource(source, {
        field: `tables.${name}.source`,
        loadTimeoutMs: policy.loadTimeoutMs ?? DEFAULT_POLICY.loadTimeoutMs,
      });
      sources.push(built);
      // A source that loads in batches serves every miss through loadMany (DataLoader-style).
      tables[name] = {
        ...policy,
        load: built.load,
        fingerprint: sourceFingerprint(source),
        ...(built.loadMany === undefined ? {} : { loadMany: built.loadMany }),
        ...(built.checkId === undefined ? {} : { checkId: built.checkId }),
        // The kind's default unless the table sets it: an http origin's 404 is confirmed first.
        ...(policy.confirmNotFoundMs === undefined && built.confirmNotFoundMs !== undefined
          ? { confirmNotFoundMs: built.confirmNotFoundMs }
          : {}),
      };
      if (warm !== undefined) {
        warmIdsOf.set(name, { config: warm, ids: await warmIds(warm, built, name, log) });
      }
    } catch (err) {
      await Promise.all(sources.map((s) => s.close()));
      if (err instanceof ConfigError)
        throw new ConfigError(`${config.origin}: ${err.message}`, { cause: err, field: err.field });
      throw err;
    }
  }
  const room = heapRoom(
    Object.values(tables).map((t) => t.l1?.maxBytes ?? DEFAULT_POLICY.l1.maxBytes),
  );
  if (!room.enough) {
    log.warn(
      { neededBytes: room.neededBytes, ceilingBytes: room.ceilingBytes },
      "V8's heap ceiling is below what the L1s may take: raise node's --max-old-space-size (ECHOSTORE_HEAP_MIB under npm start; docs/operations.md, memory)",
    );
  }
  const store = await createStore({
    valkey: config.valkey,
    ...(config.namespace === undefined ? {} : { namespace: config.namespace }),
    tables,
    registry,
    logger: log,
    readyTimeoutMs: config.valkey.connectTimeoutMs,
    coherence: config.valkey.coherence,
    ...(traces === undefined ? {} : { tracing: traces.tracing }),
  });
  let followers: ChangeFollower[];
  let readAfter: Followers['readAfter'];
  try {
    ({ followers, readAfter } = await startFollowers(config, store, registry, log));
  } catch (err) {
    await store.close(0);
    await Promise.all(sources.map((s) => s.close()));
    if (err instanceof ConfigError)
      throw new ConfigError(`${config.origin}: ${err.message}`, { cause: err, field: err.field });
    throw err;
  }
  const plans: WarmPlan[] = [...warmIdsOf].map(([name, { config: warm, ids }]) => ({
    table: store.table(name),
    ids,
    concurrency: warm.concurrency ?? DEFAULT_WARM_CONCURRENCY,
    timeoutMs: warm.timeoutMs ?? DEFAULT_WARM_TIMEOUT_MS,
  }));
  const warmUp = new StartupWarmUp(registry, Object.keys(tables));
  const lifecycle: Lifecycle = { warming: plans.length > 0, closing: false };
  const app = buildServer({
    store,
    logger: log,
    bodyLimitBytes: config.http.bodyLimitBytes,
    maxBatchBytes: config.http.maxBatchBytes,
    requestTimeoutMs: config.http.requestTimeoutMs,
    adminToken: config.http.adminToken,
    accessLogSampleRate: config.log.accessSampleRate,
    lifecycle,
    readAfter: (name) => readAfter.get(name),
  });

  const stopWarmUp = new AbortController();
  const { shutdownDelayMs } = config.http;
  closeWithGrace(
    { delay: shutdownDelayMs + CLOSE_TIMEOUT_MS, logger: log },
    async ({ signal, err }) => {
      // /readyz answers 503 from here on; a warm-up reads no further id.
      lifecycle.closing = true;
      stopWarmUp.abort();
      if (err !== undefined) {
        log.error({ err }, 'stopping after an uncaught error');
      } else {
        // Keep serving while load balancers see /readyz fail and stop sending traffic.
        log.info({ signal, shutdownDelayMs }, 'stopping: not ready, still serving');
        await sleep(shutdownDelayMs);
        log.info({ signal }, 'stopping: no longer accepting connections');
      }
      // Both at once: the server stops accepting and waits for running requests,
      // while the store gives flights 5 s and then fails what is left with
      // ECC_CLOSED, so those requests answer 503 instead of holding the close.
      // Followers first: a follower's invalidations go through the store.
      await Promise.all(followers.map((f) => f.close()));
      // A client that never completes its request (headers or body that stop: a
      // slowloris) must not hold the close to the budget: by STORE_GRACE_MS every
      // request the store was answering has its answer, so what is still open a
      // second later is a request its own client is not finishing.
      const cut = setTimeout(() => app.server.closeAllConnections(), STORE_GRACE_MS + 1_000);
      cut.unref();
      await Promise.all([app.close(), store.close(STORE_GRACE_MS)]);
      clearTimeout(cut);
      await Promise.all(sources.map((s) => s.close()));
      // Last: the spans of the requests answered while closing are exported too.
      await traces?.shutdown();
    },
  );

  try {
    await app.listen({ host: config.http.host, port: config.http.port });
  } catch (err) {
    await Promise.all(followers.map((f) => f.close()));
    await store.close(0);
    await Promise.all(sources.map((s) => s.close()));
    const code = (err as NodeJS.ErrnoException).code;
    if (
      code === 'EADDRINUSE' ||
      code === 'EACCES' ||
      code === 'EADDRNOTAVAIL' ||
      code === 'ENOTFOUND' ||
      code === 'EAI_AGAIN'
    ) {
      throw new ListenError(
        `cannot listen on ${config.http.host}:${config.http.port} (${code}); set PORT or HOST, or http.port in the config`,
      );
    }
    throw err;
  }
  if (config.http.adminToken === undefined && !isLoopback(config.http.host)) {
    log.warn(
      { warning: 'protected-mode', host: config.http.host },
      `listening beyond loopback without an admin token: ${PROTECTED_MODE_HINT}`,
    );
  }
  log.info(
    {
      config: config.origin,
      valkey:
        config.valkey.cluster !== undefined
          ? { cluster: config.valkey.cluster.nodes }
          : config.valkey.sentinel !== undefined
            ? // Its names only: the Sentinels' password stays out of the log.
              {
                sentinel: {
                  sentinels: config.valkey.sentinel.sentinels,
                  name: config.valkey.sentinel.name,
                },
              }
            : redactUrl(config.valkey.url),
      tls: config.valkey.tls !== undefined || /^rediss:/i.test(config.valkey.url),
      traces:
        config.traceExport === undefined
          ? 'off'
          : { url: exportUrl(config.traceExport.url), protocol: config.traceExport.protocol },
      valkeyReady: store.valkeyReady(),
      tables: Object.keys(tables),
      warming: lifecycle.warming,
    },
    'echostore is serving',
  );
  if (plans.length > 0) {
    await warmUp.run(plans, log, stopWarmUp.signal);
    lifecycle.warming = false;
    if (!lifecycle.closing) log.info('warm-up finished: ready');
  }
}

/** The OTLP URL as it may be logged: scheme, host, port and path (never its query). */
function exportUrl(url: string): string {
  const u = new URL(url);
  return `${u.origin}${u.pathname}`;
}

/** The listen address is taken or not allowed: a clear message, no stack trace. */
export class ListenError extends Error {}

/**
 * Runs {@link serve} as the process: a failure to start is one line on
 * stderr and the exit code docs/cli.md lists (64: an unknown argument or a
 * `--config` without a path, 2: invalid configuration, 1: anything else).
 */
export function runService(argv: readonly string[]): void {
  const usage = configArgsUsageError(argv);
  if (usage !== undefined) {
    process.stderr.write(`echostore serve: ${usage}\n\nUsage: echostore serve [--config <file>]\n`);
    process.exit(64);
  }
  serve(argv).catch((err: unknown) => {
    if (err instanceof ListenError) {
      process.stderr.write(`echostore: ${err.message}\n`);
      process.exit(1);
    }
    if (err instanceof EchoStoreError && err.code === 'ECC_BAD_CONFIG') {
      process.stderr.write(`echostore: invalid configuration (${err.code}): ${err.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`echostore: failed to start: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  });
}
