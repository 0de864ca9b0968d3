/**
 * What the process says about itself: prom-client's default Node.js metrics
 * and `echostore_build_info` (the Prometheus convention for "which build runs
 * here": a gauge always 1 whose labels carry the version).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { collectDefaultMetrics, Gauge, type Registry } from 'prom-client';

/** This package's version, read from the nearest `package.json` named `echostore` above this file. */
export function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
      if (pkg.name === 'echostore' && typeof pkg.version === 'string') return pkg.version;
    } catch {
      // no package.json here: look one folder up
    }
    dir = dirname(dir);
  }
  return 'unknown';
}

/** Registers `echostore_build_info{version, node_version} 1` on `registry`. */
export function registerBuildInfo(registry: Registry, version = packageVersion()): void {
  new Gauge({
    name: 'echostore_build_info',
    help: 'Always 1; its labels say which build runs: the echostore version and the Node.js version.',
    labelNames: ['version', 'node_version'],
    registers: [registry],
  }).set({ version, node_version: process.versions.node }, 1);
}

/**
 * prom-client's gauges whose names end in `_total`, which Prometheus keeps for
 * counters (`promtool check metrics` fails on them). Each is the sum of the
 * gauge of the same name without `_total`, by `type`, which stays.
 */
export const TOTAL_NAMED_GAUGES = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
] as const;

/** Registers prom-client's default Node.js metrics on `registry`, less {@link TOTAL_NAMED_GAUGES}. */
export function collectNodeMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
  for (const name of TOTAL_NAMED_GAUGES) registry.removeSingleMetric(name);
}
