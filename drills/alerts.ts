/**
 * Alerts drill: a real Prometheus scrapes two real instances and evaluates
 * deploy/prometheus/alerts.yml (windows scaled down) while the origin fails, slows down and an
 * instance dies; exactly each fault's alerts fire, none after it. Usage and laws:
 * drills/README.md#alerts.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { freePort } from '../harness/free-port.js';
import { type Service, startServices } from '../harness/service.js';
import { spawnValkey } from '../harness/valkey-server.js';
import { drillArgs, int, runDrill } from './lib/cli.js';
import { itemUrl, timed } from './lib/http.js';
import { Loops } from './lib/load.js';
import { Reaper } from './lib/reaper.js';
import { verdict } from './lib/report.js';
import { originConfig } from './lib/store.js';

const args = drillArgs({ scale: int(10, 1, 60), 'phase-s': int(16, 8, 300) });

const HERE = dirname(fileURLToPath(import.meta.url));
/** The repository: beside dist/ when built, else this file's parent. */
const ROOT = [resolve(HERE, '../..'), resolve(HERE, '..')].find((dir) => {
  try {
    readFileSync(join(dir, 'deploy/prometheus/alerts.yml'));
    return true;
  } catch {
    return false;
  }
}) as string;

interface PhaseResult {
  phase: string;
  firing: string[];
  pending: string[];
  expect: string;
  ok: boolean;
}

interface AlertsReport {
  pass: boolean;
  scale: number;
  phaseSeconds: number;
  prometheus: string;
  phases: PhaseResult[];
  panels: Array<{ panel: string; during: number; ok: boolean }>;
}

/** alerts.yml with every range and `for` divided by `scale` (minutes become seconds × 60 / scale). */
function scaledRules(text: string, scale: number): string {
  const seconds = (n: number, unit: string) => (unit === 'm' ? n * 60 : n) / scale;
  return text
    .replace(/\[(\d+)([ms])\]/g, (_, n, u) => `[${Math.max(2, seconds(Number(n), u))}s]`)
    .replace(/for: (\d+)([ms])/g, (_, n, u) => `for: ${Math.max(1, seconds(Number(n), u))}s`);
}

/**
 * An origin whose answers the drill switches: ok, failing (500) or slow. The first read of an id
 * starting `held-` takes 3 s whatever the mode (the drill kills an instance inside it); `held`
 * counts those ids' reads at the source.
 */
async function switchableOrigin() {
  const state = { mode: 'ok' as 'ok' | 'fail' | 'slow', reads: 0, held: new Map<string, number>() };
  const server = createServer((request, response) => {
    state.reads++;
    const id = request.url?.split('/').pop() ?? '';
    const heldReads = id.startsWith('held-') ? (state.held.get(id) ?? 0) + 1 : 0;
    if (heldReads > 0) state.held.set(id, heldReads);
    const answer = () => {
      if (state.mode === 'fail') {
        response.statusCode = 500;
        response.end('down');
        return;
      }
      response.setHeader('content-type', 'application/json');
      response.end(JSON.stringify({ id }));
    };
    setTimeout(answer, heldReads === 1 ? 3_000 : state.mode === 'slow' ? 1_500 : 5);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address() as AddressInfo;
  return {
    state,
    template: `http://127.0.0.1:${port}/items/{id}`,
    close: () => new Promise<void>((ok) => server.close(() => ok())),
  };
}

async function main(): Promise<AlertsReport> {
  let prometheusVersion: string;
  try {
    prometheusVersion = execFileSync('prometheus', ['--version'], { encoding: 'utf8' })
      .split('\n')[0]
      ?.trim() as string;
  } catch {
    throw new Error('no prometheus on the PATH (apt-get install -y prometheus)');
  }
  const scale = args.scale;
  const phaseMs = args['phase-s'] * 1_000;
  // The instances' warn lines (shedding, failed loads) are the faults themselves: keep them quiet.
  process.env.LOG_LEVEL ??= 'error';
  const reaper = new Reaper();
  const valkey = await spawnValkey();
  const origin = await switchableOrigin();
  const table = 'alerts';
  const config = originConfig({ url: valkey.url }, table, origin.template, {
    loadTimeoutMs: 4_000,
  });
  const services = await startServices(2, config, (child) => reaper.track(child));
  const [a, b] = services as [Service, Service];
  /** GETs `id` on `s` with no client timeout; its status (0: no answer). */
  const status = async (s: Service, id: string) =>
    (await timed(itemUrl(s.url, table, id), 600_000)).status;
  const dir = mkdtempSync(join(tmpdir(), 'echostore-alerts-'));
  writeFileSync(
    join(dir, 'alerts.yml'),
    scaledRules(readFileSync(join(ROOT, 'deploy/prometheus/alerts.yml'), 'utf8'), scale),
  );
  const promPort = await freePort();
  writeFileSync(
    join(dir, 'prometheus.yml'),
    stringify({
      global: { scrape_interval: '1s', evaluation_interval: '1s' },
      rule_files: ['alerts.yml'],
      scrape_configs: [
        {
          job_name: 'echostore',
          scrape_timeout: '900ms',
          static_configs: [{ targets: [a.url, b.url].map((u) => new URL(u).host) }],
        },
      ],
    }),
  );
  const prometheus = spawn(
    'prometheus',
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${promPort}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  reaper.track(prometheus);
  const api = `http://127.0.0.1:${promPort}/api/v1`;
  for (let i = 0; ; i++) {
    const up = await fetch(`${api}/query?query=up`).then(
      (r) => r.ok,
      () => false,
    );
    if (up) break;
    if (i > 100) throw new Error('prometheus did not answer within 10 s');
    await sleep(100);
  }

  // Traffic: both instances read the same cold ids at once, 20 ids a second, never awaited
  // (a slow or failing origin must not slow the traffic down); bounded by the drill's length.
  let next = 0;
  const traffic = new Loops<undefined>({
    loops: 1,
    pauseMs: 50,
    maxDurationMs: 7 * phaseMs + 60_000,
    step: async () => {
      const id = `id-${next++}`;
      for (const s of [a, b]) void status(s, id);
      return undefined;
    },
  });
  traffic.start();

  const alerts = async () => {
    const body = (await (await fetch(`${api}/alerts`)).json()) as {
      data: { alerts: Array<{ labels: Record<string, string>; state: string }> };
    };
    const name = (x: { labels: Record<string, string> }) =>
      `${x.labels.alertname}${x.labels.alertname === 'EchoStoreDown' ? `@${x.labels.instance}` : ''}`;
    const list = body.data.alerts;
    return {
      firing: [...new Set(list.filter((x) => x.state === 'firing').map(name))].sort(),
      pending: [...new Set(list.filter((x) => x.state === 'pending').map(name))].sort(),
    };
  };
  const query = async (expr: string) => {
    const body = (await (await fetch(`${api}/query?query=${encodeURIComponent(expr)}`)).json()) as {
      data: { result: Array<{ value: [number, string] }> };
    };
    return body.data.result.reduce((sum, r) => sum + Number(r.value[1]), 0);
  };
  const dashboard = JSON.parse(
    readFileSync(join(ROOT, 'deploy/grafana/dashboards/echostore.json'), 'utf8'),
  ) as { panels: Array<{ title: string; targets?: Array<{ expr: string }> }> };
  const panelExpr = (title: string) => {
    const expr = dashboard.panels.find((p) => p.title === title)?.targets?.[0]?.expr;
    if (expr === undefined) throw new Error(`the dashboard has no panel "${title}"`);
    return expr
      .replaceAll('$instance', '.*')
      .replaceAll('$table', '.*')
      .replaceAll('$__rate_interval', '5s');
  };

  const phases: PhaseResult[] = [];
  const panels: AlertsReport['panels'] = [];
  const takeovers: string[] = [];
  const phase = async (
    name: string,
    expect: string,
    check: (f: { firing: string[]; pending: string[] }) => boolean,
    during?: () => Promise<void>,
  ) => {
    // Sample the takeover alert all through the phase: it must never fire.
    const end = Date.now() + phaseMs;
    while (Date.now() < end) {
      const f = await alerts();
      if (f.firing.includes('EchoStoreLeaseTakeovers')) takeovers.push(name);
      await sleep(1_000);
    }
    await during?.();
    const f = await alerts();
    phases.push({ phase: name, ...f, expect, ok: check(f) });
  };
  const quiet = (f: { firing: string[] }) => f.firing.length === 0;
  const sliceOf = (f: { firing: string[] }, only: string) =>
    f.firing.length === 1 && f.firing[0] === only;

  await phase('baseline', 'nothing fires', quiet);
  origin.state.mode = 'fail';
  await phase(
    'errors',
    'EchoStoreLoadErrors only',
    (f) => sliceOf(f, 'EchoStoreLoadErrors'),
    async () => {
      const during = await query(panelExpr('Load errors by code'));
      panels.push({ panel: 'Load errors by code', during, ok: during > 0 });
      const fiveXX = await query('sum(rate(http_request_duration_seconds_count{code="5xx"}[5s]))');
      panels.push({
        panel: 'Request rate by route and status (5xx)',
        during: fiveXX,
        ok: fiveXX > 0,
      });
    },
  );
  origin.state.mode = 'ok';
  await phase('recovered', 'nothing fires', quiet);
  origin.state.mode = 'slow';
  // A source 300 times slower than the traffic needs sheds too (truthfully): allowed, not required.
  await phase(
    'slow',
    'EchoStoreSlowLoads (and EchoStoreShedding)',
    (f) =>
      f.firing.includes('EchoStoreSlowLoads') &&
      f.firing.every((x) => x === 'EchoStoreSlowLoads' || x === 'EchoStoreShedding'),
  );
  origin.state.mode = 'ok';
  await phase('recovered again', 'nothing fires', quiet);
  // B dies holding leases: it reads ids only it has asked for, and is SIGKILLed while the source
  // takes 3 s over each; then A reads them, waits out B's unrenewed leases and takes them over.
  const held = ['held-0', 'held-1', 'held-2'];
  for (const id of held) void status(b, id);
  for (let i = 0; held.some((id) => !origin.state.held.has(id)); i++) {
    if (i > 100) throw new Error('B did not read the held ids within 5 s');
    await sleep(50);
  }
  b.process.kill('SIGKILL');
  const takenOver = Promise.all(held.map((id) => status(a, id)));
  const bHost = new URL(b.url).host;
  await phase(
    'down',
    `EchoStoreDown@${bHost} and EchoStoreLeaseTakeovers (B died holding leases)`,
    (f) =>
      f.firing.length === 2 &&
      f.firing.includes(`EchoStoreDown@${bHost}`) &&
      f.firing.includes('EchoStoreLeaseTakeovers'),
  );
  const statuses = await takenOver;
  const sourceReads = held.map((id) => origin.state.held.get(id) ?? 0);
  phases.push({
    phase: 'taken over',
    firing: [
      `A answered ${statuses.join(', ')}; source reads per held id ${sourceReads.join(', ')}`,
    ],
    pending: [],
    expect: 'A answers 200 for each held id, each read twice at the source (B, then A)',
    ok: statuses.every((s) => s === 200) && sourceReads.every((n) => n === 2),
  });
  const before = takeovers.filter((p) => p !== 'down');
  phases.push({
    phase: 'all',
    firing: [...new Set(before)].map((p) => `EchoStoreLeaseTakeovers during ${p}`),
    pending: [],
    expect: 'EchoStoreLeaseTakeovers never fires before an instance dies',
    ok: before.length === 0,
  });

  await traffic.stop();
  prometheus.kill('SIGTERM');
  await Promise.all(services.map((s) => s.stop(2_000)));
  await origin.close();
  await valkey.stop();
  return {
    pass: phases.every((p) => p.ok) && panels.every((p) => p.ok),
    scale,
    phaseSeconds: phaseMs / 1000,
    prometheus: prometheusVersion,
    phases,
    panels,
  };
}

function render(r: AlertsReport): string {
  const lines = [
    `alerts drill: ${r.prometheus}, rules scaled 1/${r.scale}, ${r.phaseSeconds} s a phase`,
  ];
  for (const p of r.phases) {
    lines.push(
      `  ${p.ok ? 'ok  ' : 'FAIL'} ${p.phase.padEnd(16)} firing: ${p.firing.join(', ') || 'none'}${p.pending.length > 0 ? ` (pending: ${p.pending.join(', ')})` : ''}   expected: ${p.expect}`,
    );
  }
  for (const p of r.panels) {
    lines.push(
      `  ${p.ok ? 'ok  ' : 'FAIL'} panel ${p.panel}: ${p.during.toFixed(2)} during the fault`,
    );
  }
  lines.push(verdict(r.pass));
  return `${lines.join('\n')}\n`;
}

runDrill('alerts', args.json, main, render);
