#!/usr/bin/env node
/**
 * The service: reads the config, builds the sources and the store, serves
 * HTTP, and shuts down gracefully on SIGTERM/SIGINT (stop accepting, let
 * running requests and flights settle, quit Valkey).
 */
import closeWithGrace from 'close-with-grace';
import { pino } from 'pino';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { loadConfig } from './config/load.js';
import { ConfigError, EchoStoreError } from './errors.js';
import { watchHeapAfterGc } from './heap-gauge.js';
import { buildServer } from './http/server.js';
import { buildSource, type Source } from './sources/index.js';
import { createStore, type TableOptions } from './store/store.js';
import { redactUrl } from './valkey.js';

async function main(): Promise<void> {
  const config = loadConfig({ argv: process.argv.slice(2), env: process.env });
  const log = pino({
    level: config.log.level,
    redact: { paths: ['req.headers.authorization', '*.password', '*.token'], censor: '***' },
  });
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  watchHeapAfterGc(registry);

  const sources: Source[] = [];
  const tables: Record<string, TableOptions> = Object.create(null);
  for (const [name, { source, ...policy }] of Object.entries(config.tables)) {
    let built: Source;
    try {
      built = buildSource(source, `tables.${name}.source`);
    } catch (err) {
      for (const s of sources) s.close();
      if (err instanceof ConfigError)
        throw new ConfigError(`${config.origin}: ${err.message}`, { cause: err });
      throw err;
    }
    sources.push(built);
    tables[name] = { ...policy, load: built.load };
  }
  const store = await createStore({
    valkey: config.valkey,
    tables,
    registry,
    logger: log,
    readyTimeoutMs: config.valkey.connectTimeoutMs,
  });
  const app = buildServer({
    store,
    logger: log,
    bodyLimitBytes: config.http.bodyLimitBytes,
    adminToken: config.http.adminToken,
  });

  closeWithGrace({ delay: 15_000, logger: log }, async ({ signal, err }) => {
    if (err !== undefined) log.error({ err }, 'stopping after an uncaught error');
    else log.info({ signal }, 'stopping');
    // Both at once: the server stops accepting and waits for running requests,
    // while the store gives flights 5 s and then fails what is left with
    // ECC_CLOSED, so those requests answer 503 instead of holding the close.
    await Promise.all([app.close(), store.close(5_000)]);
    for (const s of sources) s.close();
  });

  try {
    await app.listen({ host: config.http.host, port: config.http.port });
  } catch (err) {
    await store.close(0);
    for (const s of sources) s.close();
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL') {
      throw new ListenError(
        `cannot listen on ${config.http.host}:${config.http.port} (${code}); set PORT or HOST, or http.port in the config`,
      );
    }
    throw err;
  }
  log.info(
    {
      config: config.origin,
      valkey: redactUrl(config.valkey.url),
      valkeyReady: store.valkeyReady(),
      tables: Object.keys(tables),
    },
    'echostore is serving',
  );
}

/** The listen address is taken or not allowed: a clear message, no stack trace. */
class ListenError extends Error {}

main().catch((err: unknown) => {
  if (err instanceof ListenError) {
    process.stderr.write(`echostore: ${err.message}\n`);
    process.exit(1);
  }
  if (err instanceof EchoStoreError && err.code === 'ECC_BAD_CONFIG') {
    process.stderr.write(`echostore: invalid configuration: ${err.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`echostore: failed to start: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(1);
});
