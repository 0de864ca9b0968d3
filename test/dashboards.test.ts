import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { type Origin, startOrigin } from '../harness/origin.js';
import { requirePromtool } from './helpers/promtool.js';
import { startServiceProcess } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const DASHBOARD = resolve(ROOT, 'deploy/grafana/dashboards/echostore.json');
const RULES = resolve(ROOT, 'deploy/prometheus/alerts.yml');
const RULE_TESTS = resolve(ROOT, 'deploy/prometheus/alerts.test.yml');
const PROMETHEUS = resolve(ROOT, 'deploy/prometheus/prometheus.yml');

interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { uid?: string };
  gridPos: { x: number; w: number };
  targets?: { expr: string }[];
  panels?: Panel[];
}
interface Dashboard {
  uid: string;
  panels: Panel[];
  templating: { list: { name: string; query: unknown }[] };
}
interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels: { severity: string };
  annotations: { summary: string; description: string };
}

/** Every metric name a PromQL expression names (ours, the request metrics, and Node's default ones). */
const metricNames = (expr: string): string[] =>
  expr.match(/\b(?:echostore|process|nodejs|http)_[a-z0-9_]+/g) ?? [];

const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as Dashboard;
const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
const graphs = panels.filter((p) => p.type !== 'row');
const rules = (
  parse(readFileSync(RULES, 'utf8')) as { groups: { rules: Rule[] }[] }
).groups.flatMap((g) => g.rules);
const panelExprs = graphs.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
const variableExprs = dashboard.templating.list.flatMap((v) =>
  typeof v.query === 'object' && v.query !== null ? [(v.query as { query: string }).query] : [],
);

describe('dashboards and alerts', () => {
  let origin: Origin;
  /** Metric families the real service declares (`# TYPE name kind`). */
  const families = new Map<string, string>();

  beforeAll(async () => {
    origin = await startOrigin(1);
    const table = uniqueTable('dash');
    const service = await startServiceProcess(
      {
        valkey: { url: valkeyUrl() },
        tables: {
          [table]: { source: { kind: 'http', url: origin.template }, warm: { ids: ['1'] } },
        },
      },
      { inHook: true },
    );
    try {
      await fetch(`${service.url}/v1/tables/${table}/items/2`); // a load: the histograms get samples
      const text = await (await fetch(`${service.url}/metrics`)).text();
      for (const [, name, kind] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
        families.set(name as string, kind as string);
      }
    } finally {
      service.process.kill('SIGKILL');
    }
  });
  afterAll(async () => {
    await origin?.close();
  });

  /** `name` is a family of /metrics, or a series of a histogram family (`_bucket`, `_sum`, `_count`). */
  const exists = (name: string): boolean => {
    if (families.has(name)) return true;
    const base = name.replace(/_(bucket|sum|count)$/, '');
    return base !== name && families.get(base) === 'histogram';
  };

  it('names only metrics the service exports, in every panel, variable and rule', () => {
    const named = [...panelExprs, ...variableExprs, ...rules.map((r) => r.expr)].flatMap(
      metricNames,
    );
    expect(new Set(named).size).toBeGreaterThan(15);
    expect(families.size).toBeGreaterThan(20);
    expect([...new Set(named)].filter((n) => !exists(n))).toEqual([]);
  });

  it('has the panels the operators asked for', () => {
    const shown = new Set(panelExprs.flatMap(metricNames));
    for (const metric of [
      'echostore_reads_total', // hit ratio per layer
      'echostore_loads_total', // loads vs coalesced
      'echostore_coalesced_total',
      'echostore_lease_total', // lease outcomes
      'echostore_shed_total',
      'echostore_valkey_degraded',
      'echostore_load_duration_seconds_bucket', // load latency
      'echostore_flights',
      'echostore_mailbox_depth',
      'echostore_writes_refused_total', // PUT/DELETE refused while degraded
      'http_request_duration_seconds_count', // RED: rate and errors
      'http_request_duration_seconds_bucket', // RED: duration
    ]) {
      expect(shown, metric).toContain(metric);
    }
    expect(graphs.find((p) => /hit ratio/i.test(p.title))?.targets?.[0]?.expr).toMatch(
      /sum by \(layer\)/,
    );
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const p of graphs) {
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax, not a template
      expect(p.datasource?.uid, p.title).toBe('${datasource}');
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
    }
  });

  it('alerts on degraded, shedding, load errors, takeovers, slow loads, down and change streams', () => {
    const byName = new Map(rules.map((r) => [r.alert, r]));
    expect(byName.get('EchoStoreDegraded')).toMatchObject({ for: '1m' });
    expect(byName.get('EchoStoreDegraded')?.expr).toContain('echostore_valkey_degraded');
    expect(byName.get('EchoStoreShedding')?.expr).toContain('echostore_shed_total');
    expect(byName.get('EchoStoreLoadErrors')?.expr).toContain('echostore_load_errors_total');
    expect(byName.get('EchoStoreLeaseTakeovers')?.expr).toContain('outcome="takeover"');
    expect(byName.get('EchoStoreChangeStreamLag')?.expr).toContain('echostore_changes_lag_bytes');
    expect(byName.get('EchoStoreChangeStreamUnread')?.expr).toContain('echostore_changes_holder');
    expect(byName.get('EchoStoreSlowLoads')?.expr).toContain('echostore_load_duration_seconds');
    expect(byName.get('EchoStoreDown')?.expr).toContain('up{job="echostore"}');
    // No alert waits out a long window after a long rate: it would page after the fault.
    for (const r of rules) expect(r.expr, r.alert).not.toMatch(/\[5m\]/);
    for (const r of rules) {
      expect(['warning', 'critical'], r.alert).toContain(r.labels.severity);
      expect(r.annotations.summary, r.alert).toBeTruthy();
      expect(r.annotations.description, r.alert).toBeTruthy();
    }
  });

  it("lists every alert rule in docs/operations.md's table, with its severity", () => {
    const doc = readFileSync(resolve(ROOT, 'docs/operations.md'), 'utf8');
    for (const r of rules) {
      expect(doc, r.alert).toMatch(
        new RegExp(`^\\| \`${r.alert}\` +\\|.*\\| ${r.labels.severity} +\\|$`, 'm'),
      );
    }
  });

  it('provisions Grafana and Prometheus in docker-compose.yml with files that exist', () => {
    const compose = parse(readFileSync(resolve(ROOT, 'docker-compose.yml'), 'utf8')) as {
      services: Record<string, { volumes?: string[] }>;
    };
    const mounts = Object.values(compose.services).flatMap((s) => s.volumes ?? []);
    for (const mount of mounts)
      expect(existsSync(resolve(ROOT, mount.split(':')[0] as string)), mount).toBe(true);
    expect(mounts).toContain('./deploy/prometheus:/etc/prometheus:ro');
    expect(mounts).toContain('./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro');
    const prometheus = parse(readFileSync(PROMETHEUS, 'utf8')) as { rule_files: string[] };
    expect(prometheus.rule_files.map((f) => resolve(dirname(PROMETHEUS), f))).toEqual([RULES]);
  });

  it('passes promtool: the rules and the config check, the rules unit tests pass', (ctx) => {
    requirePromtool(ctx, 'dashboards.test.ts');
    const run = (...argv: string[]) =>
      execFileSync('promtool', argv, { encoding: 'utf8', cwd: ROOT });
    expect(run('check', 'rules', RULES)).toMatch(/SUCCESS: 8 rules found/);
    expect(run('check', 'config', PROMETHEUS)).toMatch(/SUCCESS/);
    expect(run('test', 'rules', RULE_TESTS)).toMatch(/SUCCESS/);
  });
});
